//! NFSv4 READDIR of an export's directory: pages end exactly where the
//! reply is full, and a listing continued page by page (the server keeps the
//! directory open between pages) returns every entry once; a maxcount too
//! small for one entry is TOOSMALL.
//!
//!   cargo build -p tarn && cargo test -p client --test tarn_readdir

mod harness;

use harness::*;
use proto::nfs4::*;
use std::collections::HashMap;

#[test]
fn large_directory_lists_every_entry_once() {
    let t = Tarn::start(&[]);
    let dir = t.export.join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..3000 {
        std::fs::write(dir.join(format!("entry-with-a-longish-name-{i:05}")), b"").unwrap();
    }
    run(async {
        let s = session(t.addr).await;
        let fh = s.lookup_path("/many").await.unwrap();
        // Twice: the second listing must not be confused by the first's streams.
        for _ in 0..2 {
            let mut seen: HashMap<String, usize> = HashMap::new();
            for e in s.readdir(&fh).await.unwrap() {
                *seen.entry(e.name).or_default() += 1;
            }
            assert_eq!(seen.len(), 3000);
            assert!(seen.values().all(|&n| n == 1));
        }
        let small = |maxcount| {
            s.call(vec![
                putfh(&fh),
                NfsArgop4::OP_READDIR(Readdir4args {
                    cookie: 0,
                    cookieverf: [0; 8],
                    dircount: 0,
                    maxcount,
                    attr_request: client::nfs4::attr::bitmap(&[FATTR4_TYPE, FATTR4_FILEID]),
                }),
            ])
        };
        assert_eq!(err(small(40).await), Nfsstat4::NFS4ERR_TOOSMALL);
        // Room for about one entry: a page with at least one, not eof.
        let r = small(140).await.unwrap();
        let NfsResop4::OP_READDIR(Readdir4res::NFS4_OK(ok)) = &r[1] else {
            panic!("{r:?}")
        };
        assert!(!ok.reply.entries.is_empty() && !ok.reply.eof);
    });
}
