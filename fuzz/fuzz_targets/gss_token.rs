//! RFC 4121 MIC and Wrap tokens as the acceptor receives them (the Rust
//! per-message crypto of an established RPCSEC_GSS context), with fixed
//! keys of each AES enctype. A forged token is refused, never a panic; a
//! token that the initiator side made is accepted.
#![no_main]
use krb5::{Cfx, Enctype, Key, Role};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct Pair {
    acceptor: Cfx,
    initiator: Cfx,
}

fn pairs() -> &'static Vec<Pair> {
    static P: OnceLock<Vec<Pair>> = OnceLock::new();
    P.get_or_init(|| {
        [
            Enctype::Aes128CtsHmacSha1,
            Enctype::Aes256CtsHmacSha1,
            Enctype::Aes128CtsHmacSha256,
            Enctype::Aes256CtsHmacSha384,
        ]
        .iter()
        .flat_map(|&e| {
            let key = Key::new(e, &vec![0x5a; e.key_len()]).unwrap();
            let sub = Key::new(e, &vec![0xa5; e.key_len()]).unwrap();
            [None, Some(sub)].into_iter().map(move |s| Pair {
                acceptor: Cfx::new(Role::Acceptor, &key, s.as_ref(), 7),
                initiator: Cfx::new(Role::Initiator, &key, s.as_ref(), 7),
            })
        })
        .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, tok)) = data.split_first() else {
        return;
    };
    let p = &pairs()[sel as usize % pairs().len()];
    let c = &p.acceptor;
    let _ = c.verify_mic(b"the message", tok);
    let _ = c.verify_mic(tok, tok);
    let _ = c.unwrap(tok);
    let mut buf = tok.to_vec();
    if let Ok(u) = c.unwrap_in_place(&mut buf) {
        assert!(u.range.end <= buf.len());
    }
    // What the peer makes of the same bytes goes through.
    let conf = sel & 0x80 != 0;
    let w = p.initiator.wrap(conf, tok);
    assert_eq!(
        c.unwrap(&w).expect("a real token unwraps"),
        (tok.to_vec(), conf)
    );
    let m = p.initiator.get_mic(&[tok]);
    c.verify_mic(tok, &m).expect("a real MIC verifies");
});
