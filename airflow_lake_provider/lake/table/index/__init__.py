"""Indexes: which file group holds a record key."""
