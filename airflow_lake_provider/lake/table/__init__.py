"""One table: its timeline and the store that alone writes `.hoodie/`, the file system view,
the merge of a file slice, snapshot reads and writes."""
