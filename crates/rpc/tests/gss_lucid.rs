//! The Rust per-message crypto against MIT's, with a real KDC: a context
//! between a libgssapi initiator and the server's accept path
//! (`gss::lucid`) is exported, and then tokens MIT makes as initiator
//! (MIC, wrap with and without confidentiality) verify and unwrap in Rust,
//! and tokens Rust makes as acceptor verify and unwrap in MIT, for each
//! AES enctype the realm issues.

#[path = "common/kdc.rs"]
mod kdc;
use libgssapi::context::SecurityContext;

#[test]
fn rust_tokens_interoperate_with_mit() {
    let _env = kdc::ENV.lock().unwrap_or_else(|e| e.into_inner());
    let kdc = kdc::Kdc::start();
    let big: Vec<u8> = (0..65_539u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let msgs: [&[u8]; 5] = [b"", b"x", b"sixteen bytes!!!", &big[..1000], &big];
    for (name, number) in kdc::ENCTYPES {
        let (mut client, server) = kdc::establish(&kdc, name);
        assert_eq!(server.session_enctype(), Some(number), "{name}");
        let l = server.export().map_err(|(_, e)| e).unwrap();
        assert!(!l.initiate);
        assert_eq!(l.protocol, 1, "{name}: CFX");
        assert_eq!(l.ctx_key.enctype, number);
        if let Some(s) = &l.acceptor_subkey {
            assert_eq!(s.enctype, number);
        }
        let cfx = rpc::gss::cfx_from_lucid(&l).unwrap();
        assert_eq!(cfx.enctype().number(), number);
        for m in msgs {
            let what = format!("{name}, {} bytes", m.len());
            // MIT initiator -> Rust acceptor.
            let mic = client.get_mic(m).unwrap();
            cfx.verify_mic(m, &mic)
                .unwrap_or_else(|e| panic!("{what}: MIC: {e}"));
            let mut bad = m.to_vec();
            bad.push(0);
            assert!(cfx.verify_mic(&bad, &mic).is_err(), "{what}");
            for conf in [true, false] {
                let w = client.wrap(conf, m).unwrap();
                let (plain, sealed) = cfx
                    .unwrap(&w)
                    .unwrap_or_else(|e| panic!("{what}: unwrap conf={conf}: {e}"));
                assert_eq!((&plain[..], sealed), (m, conf), "{what}");
            }
            // Rust acceptor -> MIT initiator (which checks our sequence
            // numbers: the context asked for sequence and replay checks).
            let mic = cfx.get_mic(&[m]);
            client
                .verify_mic(m, &mic)
                .unwrap_or_else(|e| panic!("{what}: MIT verify_mic: {e}"));
            for conf in [true, false] {
                let w = cfx.wrap(conf, m);
                let plain = client
                    .unwrap(&w)
                    .unwrap_or_else(|e| panic!("{what}: MIT unwrap conf={conf}: {e}"));
                assert_eq!(&plain[..], m, "{what}");
            }
        }
        eprintln!("{name}: MIT and Rust tokens agree");
    }
}

/// A failed export hands the MIT context back, still working; the
/// sequence number of the first token Rust sends is the one MIT expects.
#[test]
fn mit_path_after_establishment_still_works() {
    let _env = kdc::ENV.lock().unwrap_or_else(|e| e.into_inner());
    let kdc = kdc::Kdc::start();
    let (mut client, mut server) = kdc::establish(&kdc, "aes256-cts-hmac-sha1-96");
    let (who, life) = server.peer().unwrap();
    assert_eq!(who, format!("{}@{}", kdc::USER, kdc::REALM));
    assert!(life.as_secs() > 0);
    let w = client.wrap(true, b"args").unwrap();
    assert_eq!(server.unwrap(&w).unwrap(), (b"args".to_vec(), true));
    let mic = server.get_mic(b"reply").unwrap();
    client.verify_mic(b"reply", &mic).unwrap();
    let w = server.wrap(true, b"results").unwrap();
    assert_eq!(&client.unwrap(&w).unwrap()[..], b"results");
}
