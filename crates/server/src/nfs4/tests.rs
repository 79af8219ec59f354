//! COMPOUND tests: see end-to-end tests in crates/tarn/tests/nfs4*.rs.
