//! FREE_STATEID and TEST_STATEID (RFC 8881 §18.38, §18.48): a client asks
//! about, or lets go of, stateids the state core keeps. Tests:
//! `nfs4/tests/stateids.rs`.

use super::compound::Compound;
use proto::nfs4::*;

pub fn free_stateid(c: &mut Compound<'_>, a: FreeStateid4args) -> FreeStateid4res {
    FreeStateid4res {
        // The current stateid is resolved too (§16.2.3.1.2).
        fsr_status: match c
            .clientid()
            .and_then(|id| c.stateid(&a.fsa_stateid).map(|sid| (id, sid)))
        {
            Ok((id, sid)) => c.n.state.free_stateid(id, &sid),
            Err(f) => f.status,
        },
    }
}

pub fn test_stateid(c: &mut Compound<'_>, a: TestStateid4args) -> TestStateid4res {
    match c.clientid() {
        Ok(id) => TestStateid4res::NFS4_OK(TestStateid4resok {
            tsr_status_codes: a
                .ts_stateids
                .iter()
                .map(|s| c.n.state.test_stateid(id, s))
                .collect(),
        }),
        Err(f) => TestStateid4res::Default(f.status),
    }
}
