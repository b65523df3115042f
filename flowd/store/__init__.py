"""Files under `.flow/`: settings and roster files, the inbox, JSON Schema export."""
