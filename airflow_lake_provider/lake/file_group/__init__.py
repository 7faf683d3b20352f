"""File groups and file slices: file names, the model, and the file system view that builds them."""
