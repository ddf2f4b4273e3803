"""Sources: a dataset kept in sync with a git repository, a server folder, a web site, an
S3-compatible bucket, a Confluence space, a Yuque book or a Feishu/Lark wiki space or folder."""
