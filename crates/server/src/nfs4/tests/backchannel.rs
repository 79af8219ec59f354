//! The NFSv4.1 back channel: CREATE_SESSION's CONN_BACK_CHAN, the CB_NULL
//! probe, CB_COMPOUNDs led by CB_SEQUENCE, BIND_CONN_TO_SESSION and
//! BACKCHANNEL_CTL, and the callback-path flags SEQUENCE reports.

use super::*;
use crate::nfs4::callback::channel::{
    CbFail, SEQ4_STATUS_BACKCHANNEL_FAULT, SEQ4_STATUS_CB_PATH_DOWN,
    SEQ4_STATUS_CB_PATH_DOWN_SESSION,
};

const DOWN: u32 = SEQ4_STATUS_CB_PATH_DOWN | SEQ4_STATUS_CB_PATH_DOWN_SESSION;

fn recall_any() -> NfsCbArgop4 {
    NfsCbArgop4::OP_CB_RECALL_ANY(CbRecallAny4args {
        craa_objects_to_keep: 0,
        craa_type_mask: vec![1],
    })
}

fn bind(s: &Sess, dir: ChannelDirFromClient4) -> NfsArgop4 {
    NfsArgop4::OP_BIND_CONN_TO_SESSION(BindConnToSession4args {
        bctsa_sessid: s.id,
        bctsa_dir: dir,
        bctsa_use_conn_in_rdma_mode: false,
    })
}

#[tokio::test]
async fn a_back_channel_is_probed_and_carries_cb_sequence_in_order() {
    let fx = Fx::new(cfg(60, 0));
    let (s, fake) = fx.client_with_back("cb").await;
    assert_eq!(fake.nulls(), 1, "CB_NULL probes the new back channel");
    assert_eq!(fx.renew(&s).await, Ok(0), "a working path raises no flag");
    let bc = fx.n.backchannels.for_client(s.clientid).expect("usable");
    for want in 1..=3 {
        let (status, res) = bc
            .compound(vec![recall_any()], Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(status, NFS4_OK);
        assert!(matches!(
            &res[..],
            [NfsCbResop4::OP_CB_RECALL_ANY(CbRecallAny4res {
                crar_status: NFS4_OK
            })]
        ));
        let sent = fake.compounds().pop().unwrap();
        assert_eq!(sent.minorversion, 1);
        match &sent.argarray[..] {
            [NfsCbArgop4::OP_CB_SEQUENCE(q), NfsCbArgop4::OP_CB_RECALL_ANY(_)] => {
                assert_eq!((q.csa_sessionid, q.csa_slotid), (s.id, 0));
                assert_eq!(q.csa_sequenceid, want, "slot 0's sequence ids go up by one");
            }
            other => panic!("{other:?}"),
        }
    }
    let calls = fake.calls.lock().unwrap().clone();
    assert!(
        calls.iter().all(|c| c.1 == 0 && c.2 == CB_PROG),
        "AUTH_NONE to the program CREATE_SESSION named"
    );
}

#[tokio::test]
async fn sessions_without_a_back_channel_hear_nothing_of_it() {
    let fx = Fx::new(cfg(60, 0));
    let s = fx.client("plain").await;
    assert_eq!(fx.renew(&s).await, Ok(0));
    assert!(fx.n.backchannels.for_client(s.clientid).is_none());
    // A back channel asked for on a connection that cannot carry one.
    let ex = fx.exchange_id("nocb", 1).await;
    let s = fx.create_back_session(&ex).await;
    assert_eq!(fx.renew(&s).await, Ok(DOWN));
}

#[tokio::test]
async fn a_lost_connection_is_path_down_until_a_connection_is_bound_back() {
    let fx = Fx::new(cfg(60, 0));
    let (s, fake) = fx.client_with_back("lost").await;
    fake.answer(Answer::Closed);
    assert_eq!(fx.renew(&s).await, Ok(DOWN));
    let bc = fx.n.backchannels.session(s.clientid, &s.id).unwrap();
    assert_eq!(
        bc.compound(vec![recall_any()], Duration::from_secs(1))
            .await,
        Err(CbFail::NoPath)
    );
    // BIND_CONN_TO_SESSION from a new connection moves the back channel.
    let fresh = FakeBack::new();
    fx.connect(Some(fresh.clone()));
    let r = fx
        .compound(1, vec![bind(&s, ChannelDirFromClient4::CDFC4_BACK_OR_BOTH)])
        .await;
    fx.connect(None);
    match &r.resarray[..] {
        [NfsResop4::OP_BIND_CONN_TO_SESSION(BindConnToSession4res::NFS4_OK(ok))] => {
            assert_eq!(ok.bctsr_dir, ChannelDirFromServer4::CDFS4_BOTH)
        }
        other => panic!("{other:?}"),
    }
    tokio::task::yield_now().await;
    assert_eq!(fresh.nulls(), 1, "the new path is probed");
    assert_eq!(fx.renew(&s).await, Ok(0));
    bc.compound(vec![recall_any()], Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(fresh.compounds().len(), 1);
}

#[tokio::test]
async fn an_unanswered_callback_is_a_backchannel_fault_until_one_succeeds() {
    let fx = Fx::new(cfg(60, 0));
    let (s, fake) = fx.client_with_back("quiet").await;
    let bc = fx.n.backchannels.for_client(s.clientid).unwrap();
    fake.answer(Answer::Ignore);
    assert_eq!(
        bc.compound(vec![recall_any()], Duration::from_secs(1))
            .await,
        Err(CbFail::Call(rpc::CallbackError::Timeout))
    );
    assert_eq!(fx.renew(&s).await, Ok(SEQ4_STATUS_BACKCHANNEL_FAULT));
    fake.answer(Answer::Ok);
    bc.compound(vec![recall_any()], Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(fx.renew(&s).await, Ok(0));
}

#[tokio::test]
async fn backchannel_ctl_changes_program_and_security() {
    let fx = Fx::new(cfg(60, 0));
    let (s, fake) = fx.client_with_back("ctl").await;
    let ctl = |sec| {
        NfsArgop4::OP_BACKCHANNEL_CTL(BackchannelCtl4args {
            bca_cb_program: 0x4000_0077,
            bca_sec_parms: sec,
        })
    };
    let gss = CallbackSecParms4::RPCSEC_GSS(GssCbHandles4 {
        gcbp_service: RpcGssSvcT::RPC_GSS_SVC_NONE,
        gcbp_handle_from_server: Bytes::new(),
        gcbp_handle_from_client: Bytes::new(),
    });
    let r = fx.call(&s, vec![ctl(vec![gss.clone()])]).await;
    assert_eq!(r.status, NFS4ERR_ENCR_ALG_UNSUPP, "no flavor Tarn can send");
    let sys = CallbackSecParms4::AUTH_SYS(AuthsysParms {
        stamp: 1,
        machinename: name("client"),
        uid: 0,
        gid: 0,
        gids: vec![],
    });
    let r = fx.call(&s, vec![ctl(vec![gss, sys])]).await;
    assert_eq!(r.status, NFS4_OK);
    let bc = fx.n.backchannels.for_client(s.clientid).unwrap();
    bc.compound(vec![recall_any()], Duration::from_secs(1))
        .await
        .unwrap();
    let last = fake.calls.lock().unwrap().last().cloned().unwrap();
    assert_eq!((last.1, last.2), (1, 0x4000_0077), "AUTH_SYS, new program");
    // Without a session there is nothing to change.
    let r = fx
        .compound(1, vec![ctl(vec![CallbackSecParms4::AUTH_NONE])])
        .await;
    assert_ne!(r.status, NFS4_OK);
}

#[tokio::test]
async fn gss_only_callbacks_leave_the_path_down_and_destroyed_sessions_go() {
    let fx = Fx::new(cfg(60, 0));
    let ex = fx.exchange_id("gss", 1).await;
    fx.connect(Some(FakeBack::new()));
    let s = fx
        .create_session_with(
            ex.eir_clientid,
            ex.eir_sequenceid,
            CONN_BACK_CHAN,
            vec![CallbackSecParms4::RPCSEC_GSS(GssCbHandles4 {
                gcbp_service: RpcGssSvcT::RPC_GSS_SVC_NONE,
                gcbp_handle_from_server: Bytes::new(),
                gcbp_handle_from_client: Bytes::new(),
            })],
        )
        .await;
    fx.connect(None);
    assert_eq!(fx.renew(&s).await, Ok(DOWN));
    let r = fx
        .compound(
            1,
            vec![NfsArgop4::OP_DESTROY_SESSION(DestroySession4args {
                dsa_sessionid: s.id,
            })],
        )
        .await;
    assert_eq!(r.status, NFS4_OK);
    assert!(fx.n.backchannels.session(s.clientid, &s.id).is_none());
}

#[tokio::test]
async fn callbacks_carry_the_minor_version_the_session_was_made_with() {
    let fx = Fx::new(cfg(60, 0));
    let ex = fx.exchange_id("v42", 1).await;
    let fake = FakeBack::new();
    fx.connect(Some(fake.clone()));
    let r = fx
        .compound(
            2,
            vec![create_session_op(
                ex.eir_clientid,
                ex.eir_sequenceid,
                CONN_BACK_CHAN,
                vec![CallbackSecParms4::AUTH_NONE],
            )],
        )
        .await;
    fx.connect(None);
    assert_eq!(r.status, NFS4_OK);
    let bc = fx.n.backchannels.for_client(ex.eir_clientid).unwrap();
    bc.compound(vec![recall_any()], Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(fake.compounds()[0].minorversion, 2);
}
