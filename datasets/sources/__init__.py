"""Sources: a dataset kept in sync with a git repository, a server folder or a web site."""
