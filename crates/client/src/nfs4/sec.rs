//! RPCSEC_GSS (krb5, krb5i, krb5p) for a connection, with its context
//! renewed ahead of expiry ([`renew`](super::renew) decides when).
//!
//! Every call takes the context current when it starts and finishes on
//! it; a renewal task makes the next context on the same connection from
//! the credential cache (KRB5CCNAME) as it is then, makes it current, and
//! destroys the old one on the server once the calls under it are done.
//! A call refused because its context is gone (RPCSEC_GSS_CREDPROBLEM or
//! CTXPROBLEM: it was not executed) is sent again, once, on a fresh context.

use super::renew::{self, Decision, RenewPolicy};
use proto::rpc::AuthStat;
use rpc::client::gss::GssClient;
use rpc::client::{Channel, ClientError, RpcClient};
use rpc::gss::GssService;
use rpc::msg::ReplyStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};
use xdr::Decoder;

/// A context over a shared connection.
pub type Ctx = GssClient<Arc<RpcClient>>;

/// One context's life, for logs and tests.
#[derive(Clone, Debug)]
pub struct CtxRecord {
    pub principal: String,
    pub established: Instant,
    pub expires: Instant,
    /// When calls moved to its successor.
    pub replaced: Option<Instant>,
}

pub struct GssSec {
    rpc: Arc<RpcClient>,
    /// Calls go over this channel when set (contexts are made on one of
    /// its connections: a context is not tied to a connection).
    channel: Option<Channel>,
    service: GssService,
    target: String,
    prog: u32,
    vers: u32,
    policy: RenewPolicy,
    current: Mutex<Arc<Ctx>>,
    history: Mutex<Vec<CtxRecord>>,
    /// Held while a context is being made, so that calls failing together
    /// make one, not one each.
    making: tokio::sync::Mutex<()>,
    /// Warnings given that the credential could not be renewed; also
    /// published on `trouble` so writers can flush while the old context
    /// still works.
    warnings: AtomicU64,
    trouble: tokio::sync::watch::Sender<u64>,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for GssSec {
    fn drop(&mut self) {
        if let Some(t) = self.renewer.lock().unwrap().take() {
            t.abort();
        }
    }
}

fn refused_context(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Rpc(ReplyStatus::AuthError(
            AuthStat::RPCSEC_GSS_CREDPROBLEM | AuthStat::RPCSEC_GSS_CTXPROBLEM
        ))
    )
}

impl GssSec {
    /// Establishes a context with `target` (`nfs@host`) for `prog`/`vers`
    /// over `rpc` and starts renewing it.
    pub async fn establish(
        rpc: Arc<RpcClient>,
        prog: u32,
        vers: u32,
        service: GssService,
        target: &str,
        policy: RenewPolicy,
    ) -> Result<Arc<GssSec>, ClientError> {
        GssSec::establish_on(rpc, None, prog, vers, service, target, policy).await
    }

    /// [`GssSec::establish`] for calls over a reconnecting channel.
    pub async fn establish_channel(
        ch: Channel,
        prog: u32,
        vers: u32,
        service: GssService,
        target: &str,
        policy: RenewPolicy,
    ) -> Result<Arc<GssSec>, ClientError> {
        let rpc = ch.any_connection().await;
        GssSec::establish_on(rpc, Some(ch), prog, vers, service, target, policy).await
    }

    async fn establish_on(
        rpc: Arc<RpcClient>,
        channel: Option<Channel>,
        prog: u32,
        vers: u32,
        service: GssService,
        target: &str,
        policy: RenewPolicy,
    ) -> Result<Arc<GssSec>, ClientError> {
        let ctx = GssClient::establish(rpc.clone(), prog, vers, target).await?;
        let now = Instant::now();
        let first = CtxRecord {
            principal: ctx.principal().to_string(),
            established: now,
            expires: ctx.expires(),
            replaced: None,
        };
        let next = policy.renew_at(now, ctx.expires());
        let sec = Arc::new(GssSec {
            rpc,
            channel,
            service,
            target: target.to_string(),
            prog,
            vers,
            policy,
            current: Mutex::new(Arc::new(ctx)),
            history: Mutex::new(vec![first]),
            making: tokio::sync::Mutex::new(()),
            warnings: AtomicU64::new(0),
            trouble: tokio::sync::watch::channel(0).0,
            renewer: Mutex::new(None),
        });
        let t = tokio::spawn(renew_loop(Arc::downgrade(&sec), next));
        *sec.renewer.lock().unwrap() = Some(t);
        Ok(sec)
    }

    pub fn service(&self) -> GssService {
        self.service
    }

    /// The context calls start on now.
    pub fn current(&self) -> Arc<Ctx> {
        self.current.lock().unwrap().clone()
    }

    /// Every context this connection has had, oldest first.
    pub fn contexts(&self) -> Vec<CtxRecord> {
        self.history.lock().unwrap().clone()
    }

    /// How many times renewal warned that the credential is about to
    /// expire (or has) with no newer ticket to be had.
    pub fn warnings(&self) -> u64 {
        self.warnings.load(Ordering::Relaxed)
    }

    /// Changes each time renewal warns (the value is the warning count).
    /// A writer holding unstable data should COMMIT it when this changes:
    /// the current context still works, but may not for long.
    pub fn trouble(&self) -> tokio::sync::watch::Receiver<u64> {
        self.trouble.subscribe()
    }

    fn warn(&self) {
        let n = self.warnings.fetch_add(1, Ordering::Relaxed) + 1;
        self.trouble.send_replace(n);
    }

    /// Calls `proc_` with encoded `args` under the current context.
    pub async fn call(&self, proc_: u32, args: &[u8]) -> Result<Decoder, ClientError> {
        let ctx = self.current();
        match self.call_on(&ctx, proc_, args).await {
            Err(e) if refused_context(&e) => {
                // Not executed: safe to send again on a fresh context (the
                // same NFSv4.1 slot and seqid, as the server never saw it).
                match self.replace_after_refusal(&ctx).await {
                    Ok(fresh) => self.call_on(&fresh, proc_, args).await,
                    Err(why) => {
                        // The refusal is the call's result: it says the
                        // call was not executed (its slot did not move).
                        tracing::warn!(
                            principal = ctx.principal(),
                            "RPCSEC_GSS context refused and no new one can be made: {why}"
                        );
                        Err(e)
                    }
                }
            }
            r => r,
        }
    }

    async fn call_on(&self, ctx: &Ctx, proc_: u32, args: &[u8]) -> Result<Decoder, ClientError> {
        match &self.channel {
            Some(ch) => ctx.call_over(ch, self.service, proc_, args).await,
            None => ctx.call(self.service, proc_, args).await,
        }
    }

    /// A context other than `stale`: the one a renewal already made, or
    /// a new one now.
    async fn replace_after_refusal(&self, stale: &Arc<Ctx>) -> Result<Arc<Ctx>, ClientError> {
        let _making = self.making.lock().await;
        let cur = self.current();
        if !Arc::ptr_eq(&cur, stale) {
            return Ok(cur);
        }
        let ctx = Arc::new(self.make().await?);
        self.switch(ctx.clone(), Instant::now());
        tracing::info!(
            principal = ctx.principal(),
            "RPCSEC_GSS context refused by the server; replaced by a new one"
        );
        Ok(ctx)
    }

    async fn make(&self) -> Result<Ctx, ClientError> {
        let rpc = match &self.channel {
            Some(ch) => ch.any_connection().await,
            None => self.rpc.clone(),
        };
        GssClient::establish(rpc, self.prog, self.vers, &self.target).await
    }

    /// Makes `ctx` current; the old one is destroyed once no call uses it.
    fn switch(&self, ctx: Arc<Ctx>, now: Instant) {
        let old = std::mem::replace(&mut *self.current.lock().unwrap(), ctx.clone());
        {
            let mut h = self.history.lock().unwrap();
            if let Some(last) = h.last_mut() {
                last.replaced = Some(now);
            }
            h.push(CtxRecord {
                principal: ctx.principal().to_string(),
                established: now,
                expires: ctx.expires(),
                replaced: None,
            });
        }
        tokio::spawn(retire(old));
    }
}

/// Waits for the calls still on `old` to finish (each holds a clone), at
/// most until it expires, then tells the server to forget it.
async fn retire(old: Arc<Ctx>) {
    while Arc::strong_count(&old) > 1 && Instant::now() < old.expires() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if Instant::now() < old.expires() {
        // The server would drop it at expiry anyway; an error is no matter.
        let _ = old.destroy().await;
    }
}

async fn renew_loop(sec: Weak<GssSec>, mut next: Instant) {
    loop {
        tokio::time::sleep_until(next.into()).await;
        let Some(s) = sec.upgrade() else { return };
        let _making = s.making.lock().await;
        let old = s.current();
        let made = s.make().await;
        let now = Instant::now();
        let decision = match &made {
            Ok(ctx) => s.policy.after_success(now, old.expires(), ctx.expires()),
            Err(_) => s.policy.after_failure(now, old.expires()),
        };
        match (decision, made) {
            (Decision::Switch { next: n }, Ok(ctx)) => {
                tracing::info!(
                    principal = ctx.principal(),
                    old_expires_in_s = old.expires().saturating_duration_since(now).as_secs(),
                    new_expires_in_s = ctx.expires().saturating_duration_since(now).as_secs(),
                    "RPCSEC_GSS context renewed before expiry"
                );
                s.switch(Arc::new(ctx), now);
                next = n;
            }
            (Decision::NotRefreshed { next: n, expires }, made) => {
                if let Ok(ctx) = made {
                    // Its ticket is the old one's: no use, let it go.
                    let _ = ctx.destroy().await;
                }
                let why = "the credential cache holds no newer ticket";
                let w = renew::warning(old.principal(), expires, now, SystemTime::now(), why);
                tracing::warn!(principal = old.principal(), "{w}");
                s.warn();
                next = n;
            }
            (Decision::Failed { next: n, expires }, made) => {
                let why = match made {
                    Err(e) => e.to_string(),
                    Ok(_) => "no context".into(),
                };
                let w = renew::warning(old.principal(), expires, now, SystemTime::now(), &why);
                tracing::warn!(principal = old.principal(), "{w}");
                s.warn();
                next = n;
            }
            (Decision::Switch { next: n }, Err(_)) => next = n, // not produced
        }
    }
}
