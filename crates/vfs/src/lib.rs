//! vfs
