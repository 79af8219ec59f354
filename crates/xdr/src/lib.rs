//! xdr
