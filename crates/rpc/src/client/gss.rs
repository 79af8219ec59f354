//! An RPCSEC_GSS client over one [`RpcClient`] connection: establishes a
//! context with MIT Kerberos (the caller's credential cache), then sends
//! DATA calls under krb5, krb5i or krb5p and checks every reply's verifier.
//! Calls in flight are capped at the window the server advertised.
//!
//! Per-message crypto runs in Rust once MIT has handed over the keys (as
//! on the server), with MIT as the fallback.
//!
//! Calls are built ([`GssClient::build`]) and sent ([`GssClient::send`])
//! separately so tests can inspect or tamper with the bytes on the wire.

use super::{ClientError, RpcClient};
use crate::gss::lucid::{InitCred, MitCtx, Target};
use crate::gss::{seq_and, Crypto, GssCred, GssService};
use crate::msg::{self, ReplyStatus};
use crate::record;
use bytes::{BufMut, Bytes, BytesMut};
use proto::gss::{RpcGssInitArg, RpcGssInitRes, RpcGssIntegData, RpcGssPrivData, RpcGssProcT};
use proto::rpc::{OpaqueAuth, RPCSEC_GSS};
use std::borrow::Borrow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use xdr::{Decoder, Pack, Unpack};

fn gss_err(e: impl std::fmt::Display) -> ClientError {
    ClientError::Gss(e.to_string())
}

/// `R` is how the connection is held: owned (the default), or shared
/// (`Arc<RpcClient>`) so that a newer context can take over the same
/// connection while calls under the older one finish.
pub struct GssClient<R = RpcClient> {
    pub rpc: R,
    crypto: Crypto,
    handle: Bytes,
    seq: AtomicU32,
    /// The sequence window the server advertised.
    pub window: u32,
    slots: Semaphore,
    /// Held from numbering a call to having written it.
    send_order: tokio::sync::Mutex<()>,
    prog: u32,
    vers: u32,
    /// The initiator's principal, as MIT names it (`alice@REALM`).
    principal: String,
    /// When the context stops working (the service ticket's end), as
    /// measured when it was established.
    expires: Instant,
}

/// A call ready to send: its xid, sequence number and whole record.
#[derive(Debug, Clone)]
pub struct Built {
    pub xid: u32,
    pub seq: u32,
    pub service: GssService,
    pub record: Bytes,
}

impl<R: Borrow<RpcClient>> GssClient<R> {
    /// Establishes a context with `service@host` (for example
    /// `nfs@localhost`) using the default credential cache; the
    /// INIT calls go to `prog`/`vers` procedure NULL.
    pub async fn establish(
        rpc: R,
        prog: u32,
        vers: u32,
        target: &str,
    ) -> Result<GssClient<R>, ClientError> {
        GssClient::establish_from(rpc, prog, vers, target, None).await
    }

    /// [`GssClient::establish`] with the credential in `ccache` (a
    /// credential cache name, `FILE:/path`) instead of the default one.
    pub async fn establish_from(
        rpc: R,
        prog: u32,
        vers: u32,
        target: &str,
        ccache: Option<&str>,
    ) -> Result<GssClient<R>, ClientError> {
        let name = Target::hostbased(target).map_err(gss_err)?;
        let init_cred = match ccache {
            Some(cc) => Some(InitCred::from_ccache(cc).map_err(gss_err)?),
            None => None,
        };
        let mut ctx = MitCtx::new();
        let first_step = ctx
            .init_step_as(init_cred.as_ref(), &name, None)
            .map_err(gss_err)?;
        let mut complete = first_step.complete;
        let mut token = Some(first_step.token).filter(|t| !t.is_empty());
        let mut handle = Bytes::new();
        let mut first = true;
        loop {
            let Some(t) = token else {
                return Err(gss_err("context complete before the server answered"));
            };
            let cred = GssCred {
                proc_: if first {
                    RpcGssProcT::RPCSEC_GSS_INIT
                } else {
                    RpcGssProcT::RPCSEC_GSS_CONTINUE_INIT
                },
                seq: 0,
                service: GssService::None,
                handle: handle.clone(),
            }
            .encode();
            first = false;
            let xid = rpc.borrow().next_xid();
            let mut out = BytesMut::new();
            record::begin(&mut out);
            msg::encode_call(xid, prog, vers, 0, &cred, &mut out);
            RpcGssInitArg {
                gss_token: Bytes::copy_from_slice(&t),
            }
            .pack(&mut out);
            record::finish(&mut out);
            let rep = rpc.borrow().send_record(xid, &out).await?;
            let (_, st, verf, mut d) = msg::decode_reply_verf(rep)?;
            if st != ReplyStatus::Success {
                return Err(ClientError::Rpc(st));
            }
            let res = RpcGssInitRes::unpack(&mut d)?;
            if res.gss_major != 0 && res.gss_major != crate::gss::GSS_S_CONTINUE_NEEDED {
                return Err(gss_err(format!(
                    "server refused the context: major {:#x} minor {}",
                    res.gss_major, res.gss_minor
                )));
            }
            handle = res.handle.clone();
            let next = if res.gss_token.is_empty() {
                None
            } else {
                let st = ctx
                    .init_step_as(init_cred.as_ref(), &name, Some(&res.gss_token))
                    .map_err(gss_err)?;
                complete = st.complete;
                Some(st.token).filter(|t| !t.is_empty())
            };
            if res.gss_major == 0 {
                if !complete {
                    return Err(gss_err("server finished but the context is incomplete"));
                }
                // The INIT reply's verifier is a MIC of the window.
                let v = verf.ok_or_else(|| gss_err("no verifier"))?;
                if v.flavor != RPCSEC_GSS
                    || ctx
                        .verify_mic(&res.seq_window.to_be_bytes(), &v.body)
                        .is_err()
                {
                    return Err(gss_err("INIT reply verifier does not check"));
                }
                let window = res.seq_window.max(1);
                // Asked before the keys are exported (which consumes the
                // context): who we are, and for how long.
                let now = Instant::now();
                let (principal, life) = ctx.peer().map_err(gss_err)?;
                let expires = now
                    .checked_add(life)
                    .unwrap_or_else(|| now + Duration::from_secs(u32::MAX as u64 / 2));
                let crypto = Crypto::of(ctx)
                    .ok_or_else(|| gss_err("the context's exported keys are unusable"))?;
                return Ok(GssClient {
                    rpc,
                    crypto,
                    handle,
                    seq: AtomicU32::new(0),
                    window,
                    slots: Semaphore::new(window as usize),
                    send_order: tokio::sync::Mutex::new(()),
                    prog,
                    vers,
                    principal,
                    expires,
                });
            }
            token = next;
        }
    }

    /// The initiator's principal (the user whose ticket made the context).
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// When the context expires (the end of the service ticket).
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// The context handle the server gave.
    pub fn handle(&self) -> &Bytes {
        &self.handle
    }

    /// Builds a DATA call of `proc_` with encoded `args` under `service`.
    pub fn build(
        &self,
        service: GssService,
        proc_: u32,
        args: &[u8],
    ) -> Result<Built, ClientError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.build_with(RpcGssProcT::RPCSEC_GSS_DATA, seq, service, proc_, args)
    }

    /// A retransmission of `b` as clients make it: the same xid and
    /// arguments under the next sequence number.
    pub fn rebuild(&self, b: &Built, proc_: u32, args: &[u8]) -> Result<Built, ClientError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let cred = self.cred(RpcGssProcT::RPCSEC_GSS_DATA, seq, b.service);
        self.build_xid(b.xid, cred, proc_, args)
    }

    /// [`GssClient::build`] with an explicit sequence number and gss_proc.
    pub fn build_with(
        &self,
        gproc: RpcGssProcT,
        seq: u32,
        service: GssService,
        proc_: u32,
        args: &[u8],
    ) -> Result<Built, ClientError> {
        let xid = self.rpc.borrow().next_xid();
        self.build_xid(xid, self.cred(gproc, seq, service), proc_, args)
    }

    /// This context's credential for a call (or a control procedure).
    fn cred(&self, gproc: RpcGssProcT, seq: u32, service: GssService) -> GssCred {
        GssCred {
            proc_: gproc,
            seq,
            service,
            handle: self.handle.clone(),
        }
    }

    /// The call record of `xid` under `cred`, its arguments protected as
    /// the credential's service says.
    fn build_xid(
        &self,
        xid: u32,
        cred: GssCred,
        proc_: u32,
        args: &[u8],
    ) -> Result<Built, ClientError> {
        let (seq, service) = (cred.seq, cred.service);
        let cred = cred.encode();
        let mut out = BytesMut::with_capacity(128 + args.len() + args.len() / 16);
        record::begin(&mut out);
        msg::encode_call_head(xid, self.prog, self.vers, proc_, &cred, &mut out);
        let ctx = &self.crypto;
        let mic = ctx
            .get_mic(&out[4..])
            .ok_or_else(|| gss_err("cannot sign the call"))?;
        OpaqueAuth {
            flavor: RPCSEC_GSS,
            body: Bytes::copy_from_slice(&mic),
        }
        .pack(&mut out);
        match service {
            GssService::None => out.put_slice(args),
            GssService::Integrity => {
                let body = seq_and(seq, args);
                let checksum = ctx
                    .get_mic(&body)
                    .ok_or_else(|| gss_err("cannot sign the arguments"))?;
                RpcGssIntegData {
                    databody_integ: body.freeze(),
                    checksum: Bytes::copy_from_slice(&checksum),
                }
                .pack(&mut out);
            }
            GssService::Privacy => {
                let body = seq_and(seq, args);
                let w = ctx
                    .seal(&body)
                    .ok_or_else(|| gss_err("cannot encrypt the arguments"))?;
                xdr::pack_opaque(&w, &mut out);
            }
        }
        record::finish(&mut out);
        Ok(Built {
            xid,
            seq,
            service,
            record: out.freeze(),
        })
    }

    /// A place in the sequence window, held while the call is in flight.
    async fn slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ClientError> {
        self.slots.acquire().await.map_err(|_| ClientError::Closed)
    }

    /// Sends a built call; returns the raw reply record. At most `window`
    /// calls are in flight.
    pub async fn send(&self, b: &Built) -> Result<Bytes, ClientError> {
        let _slot = self.slot().await?;
        self.rpc.borrow().send_record(b.xid, &b.record).await
    }

    /// Checks a reply's verifier (a MIC of the call's sequence number) and
    /// unprotects its results.
    pub fn open_reply(&self, b: &Built, rep: Bytes) -> Result<Decoder, ClientError> {
        let (_, st, verf, mut d) = msg::decode_reply_verf(rep)?;
        if st != ReplyStatus::Success {
            return Err(ClientError::Rpc(st));
        }
        let v = verf.ok_or_else(|| gss_err("no verifier"))?;
        let ctx = &self.crypto;
        if v.flavor != RPCSEC_GSS || !ctx.verify_mic(&b.seq.to_be_bytes(), &v.body) {
            return Err(gss_err("reply verifier does not check"));
        }
        let body = match b.service {
            GssService::None => return Ok(d),
            GssService::Integrity => {
                let i = RpcGssIntegData::unpack(&mut d)?;
                if !ctx.verify_mic(&i.databody_integ, &i.checksum) {
                    return Err(gss_err("reply checksum does not check"));
                }
                i.databody_integ
            }
            GssService::Privacy => {
                let p = RpcGssPrivData::unpack(&mut d)?;
                ctx.unseal(&p.databody_priv).ok_or_else(|| {
                    gss_err("a krb5p reply that does not decrypt or is not encrypted")
                })?
            }
        };
        let mut d = Decoder::new(body);
        if d.u32()? != b.seq {
            return Err(gss_err("reply carries another sequence number"));
        }
        Ok(d)
    }

    /// Calls `proc_` under `service`; returns a decoder at the results.
    pub async fn call(
        &self,
        service: GssService,
        proc_: u32,
        args: &[u8],
    ) -> Result<Decoder, ClientError> {
        // Take the slot first, then the sequence number, and write the call
        // before the next one is numbered: calls leave in sequence order,
        // never more than the window at once. (Numbered first and sent
        // later, a call can fall behind the window while others overtake
        // it, and the server rightly drops it; Linux re-encodes such a
        // call before sending it.)
        let _slot = self.slot().await?;
        let (b, reply) = {
            let _order = self.send_order.lock().await;
            let b = self.build(service, proc_, args)?;
            let reply = self.rpc.borrow().write_record(b.xid, &b.record).await?;
            (b, reply)
        };
        let rep = reply.await?;
        self.open_reply(&b, rep)
    }

    /// Calls `proc_` under `service` over a [`Channel`](super::Channel):
    /// each transmission of the call carries the same xid and a new
    /// sequence number (RFC 2203 §5.3.3.1: the server may drop a sequence
    /// number it has seen), and the reply is checked against whichever
    /// transmission it answers.
    pub async fn call_over(
        &self,
        ch: &super::Channel,
        service: GssService,
        proc_: u32,
        args: &[u8],
    ) -> Result<Decoder, ClientError> {
        let _slot = self.slot().await?;
        let xid = ch.next_xid();
        let sent = std::sync::Mutex::new(Vec::<Built>::new());
        let rep = ch
            .send_record_with(xid, |_| {
                let seq = self.seq.fetch_add(1, Ordering::Relaxed);
                let cred = self.cred(RpcGssProcT::RPCSEC_GSS_DATA, seq, service);
                let b = self.build_xid(xid, cred, proc_, args)?;
                let rec = b.record.clone();
                sent.lock().unwrap().push(b);
                Ok(rec)
            })
            .await?;
        let sent = sent.into_inner().unwrap();
        // The newest transmission first: most replies answer it.
        let mut last = None;
        for b in sent.iter().rev() {
            match self.open_reply(b, rep.clone()) {
                Ok(d) => return Ok(d),
                Err(e @ ClientError::Rpc(_)) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(ClientError::Closed))
    }

    /// Ends the context on the server (RPCSEC_GSS_DESTROY).
    pub async fn destroy(&self) -> Result<(), ClientError> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let b = self.build_with(
            RpcGssProcT::RPCSEC_GSS_DESTROY,
            seq,
            GssService::None,
            0,
            &[],
        )?;
        let rep = self.send(&b).await?;
        self.open_reply(&b, rep).map(|_| ())
    }
}
