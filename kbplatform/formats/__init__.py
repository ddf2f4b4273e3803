"""Date formats of the admin and the pages (FORMAT_MODULE_PATH): times as 2026-05-04 13:07."""
