"""The timeline: instants, their files' layout and content, the active and archived timeline, the store
that alone writes under ``.hoodie/``."""
