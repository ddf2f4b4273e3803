# ISO dates, one line and a fixed width: the columns of the admin's lists fit beside the
# sidebars ("Dec. 5, 2026, 6:37 a.m." took a third more and wrapped), and sort as they read.
DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i"
