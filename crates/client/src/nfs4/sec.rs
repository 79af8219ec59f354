//! RPCSEC_GSS (krb5, krb5i, krb5p) for a connection, with its context
//! renewed ahead of expiry ([`renew`](super::renew) decides when).
//!
//! Every call takes the context current when it starts and finishes on
//! it; a renewal task makes the next context on the same connection from
//! the credential cache (KRB5CCNAME) as it is then, makes it current, and
//! destroys the old one on the server once the calls under it are done.
//! A call refused because its context is gone (RPCSEC_GSS_CREDPROBLEM or
//! CTXPROBLEM: it was not executed) is sent again, once, on a fresh context.
//!
//! Acting for many users (a FUSE mount; rpc.gssd's job under the Linux
//! kernel): a call made inside [`rpc::client::as_caller`] goes under a
//! context of the caller's uid instead, from that user's credential cache
//! ([`ccache`](super::ccache): the calling process's KRB5CCNAME, else
//! `/tmp/krb5cc_UID`). Each uid's context is made on its first call,
//! renewed ahead of expiry like the client's own (a [`GssSec`] of its
//! own), and dropped when idle or beyond the cap ([`users`](super::users)).
//! A uid without a usable credential gets RPCSEC_GSS_CREDPROBLEM (EACCES
//! to a file system), never the client's own identity; this is logged once
//! per uid. Callers acting as uid 0 or as the client's own uid use the
//! client's own context: root's requests on a root mount go as the
//! mounter's credential (the machine's, when the mount was made from a
//! keytab), as rpc.gssd uses the machine credential for root.

use super::ccache;
use super::renew::{self, Decision, RenewPolicy};
use super::users::{acts_for, Found, UserLimits, UserTable};
use proto::rpc::AuthStat;
use rpc::client::gss::GssClient;
use rpc::client::{Channel, ClientError, RpcClient};
use rpc::gss::GssService;
use rpc::msg::ReplyStatus;
use std::collections::HashMap;
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
    /// still works (users' contexts publish on their client's).
    warnings: AtomicU64,
    trouble: Arc<tokio::sync::watch::Sender<u64>>,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Whose credential this context is made from.
    source: Source,
    /// Contexts of the local users this client acts for (the client's own
    /// [`GssSec`] only).
    users: Option<Users>,
}

/// Where a context's credential comes from.
#[derive(Clone, Debug)]
enum Source {
    /// The process's default credential cache (KRB5CCNAME, or a keytab).
    Own,
    /// Local user `uid`'s cache `ccname`, read by us and checked to be
    /// theirs.
    User { uid: u32, ccname: String },
}

struct Users {
    table: Mutex<UserTable<Arc<GssSec>>>,
    /// Held while a uid's context is being made (by uid: one slow KDC
    /// answer for one user does not hold up the others).
    making: Mutex<HashMap<u32, Arc<tokio::sync::Mutex<()>>>>,
    /// The uid this process runs as: its callers use the own context.
    own_uid: u32,
    sweeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Users {
    /// What the table says of `uid` now: its live context, or the
    /// refusal it recently met; None when a context is to be made.
    fn known(&self, uid: u32) -> Option<Result<Arc<GssSec>, ClientError>> {
        match self.table.lock().unwrap().find(uid, Instant::now()) {
            Found::Live(s) => Some(Ok(s)),
            Found::Refused => Some(Err(no_credential())),
            Found::Absent => None,
        }
    }
}

impl Drop for GssSec {
    fn drop(&mut self) {
        if let Some(t) = self.renewer.lock().unwrap().take() {
            t.abort();
        }
        if let Some(u) = &self.users {
            if let Some(t) = u.sweeper.lock().unwrap().take() {
                t.abort();
            }
        }
    }
}

/// What a call of a user without a usable credential gets: an RPC
/// authentication error, as if the server had refused it (it was not
/// sent: an NFSv4.1 slot is not used up), EACCES to a file system.
pub fn no_credential() -> ClientError {
    ClientError::Rpc(ReplyStatus::AuthError(AuthStat::RPCSEC_GSS_CREDPROBLEM))
}

fn own_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

/// Distinguishes the private copies of caches alive at once.
static COPIES: AtomicU64 = AtomicU64::new(0);

/// A context for `prog`/`vers` with `target` over `rpc`, from `source`.
async fn make_ctx(
    rpc: Arc<RpcClient>,
    prog: u32,
    vers: u32,
    target: &str,
    source: &Source,
) -> Result<Ctx, ClientError> {
    match source {
        Source::Own => GssClient::establish(rpc, prog, vers, target).await,
        Source::User { uid, ccname } => {
            let tag = COPIES.fetch_add(1, Ordering::Relaxed);
            let copy = ccache::Copy::of(ccname, *uid, tag).map_err(ClientError::Gss)?;
            GssClient::establish_from(rpc, prog, vers, target, Some(&copy.name())).await
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

/// What a context is for: the program and version whose calls it
/// protects and at which service level, the server's principal (`target`,
/// `nfs@host`), and when it is renewed.
#[derive(Clone, Copy, Debug)]
pub struct GssTarget<'a> {
    pub prog: u32,
    pub vers: u32,
    pub service: GssService,
    pub target: &'a str,
    pub policy: RenewPolicy,
}

impl GssSec {
    /// Establishes a context for `t` over `rpc` and starts renewing it.
    pub async fn establish(
        rpc: Arc<RpcClient>,
        t: GssTarget<'_>,
    ) -> Result<Arc<GssSec>, ClientError> {
        GssSec::establish_on(rpc, None, t).await
    }

    /// [`GssSec::establish`] for calls over a reconnecting channel.
    pub async fn establish_channel(
        ch: Channel,
        t: GssTarget<'_>,
    ) -> Result<Arc<GssSec>, ClientError> {
        let rpc = ch.any_connection().await?;
        GssSec::establish_on(rpc, Some(ch), t).await
    }

    async fn establish_on(
        rpc: Arc<RpcClient>,
        channel: Option<Channel>,
        t: GssTarget<'_>,
    ) -> Result<Arc<GssSec>, ClientError> {
        let users = Users {
            table: Mutex::new(UserTable::new(UserLimits::default())),
            making: Mutex::default(),
            own_uid: own_uid(),
            sweeper: Mutex::new(None),
        };
        GssSec::make_sec(rpc, channel, t, Source::Own, Some(users), None).await
    }

    async fn make_sec(
        rpc: Arc<RpcClient>,
        channel: Option<Channel>,
        t: GssTarget<'_>,
        source: Source,
        users: Option<Users>,
        trouble: Option<Arc<tokio::sync::watch::Sender<u64>>>,
    ) -> Result<Arc<GssSec>, ClientError> {
        let GssTarget {
            prog,
            vers,
            service,
            target,
            policy,
        } = t;
        let ctx = make_ctx(rpc.clone(), prog, vers, target, &source).await?;
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
            trouble: trouble.unwrap_or_else(|| Arc::new(tokio::sync::watch::channel(0).0)),
            renewer: Mutex::new(None),
            source,
            users,
        });
        let t = tokio::spawn(renew_loop(Arc::downgrade(&sec), next));
        *sec.renewer.lock().unwrap() = Some(t);
        if let Some(u) = &sec.users {
            let t = tokio::spawn(sweep_loop(Arc::downgrade(&sec)));
            *u.sweeper.lock().unwrap() = Some(t);
        }
        Ok(sec)
    }

    /// Sets how many users' contexts are kept and for how long (before
    /// any call acts for a user).
    pub fn set_user_limits(&self, limits: UserLimits) {
        if let Some(u) = &self.users {
            *u.table.lock().unwrap() = UserTable::new(limits);
        }
    }

    /// The local user a call in this task acts for, when it is not the
    /// client itself (see the module comment).
    fn acting_for(&self) -> Option<(&Users, u32)> {
        let users = self.users.as_ref()?;
        let uid = acts_for(rpc::client::current_caller_uid(), users.own_uid)?;
        Some((users, uid))
    }

    /// How many local users have a context now.
    pub fn user_contexts(&self) -> usize {
        self.users
            .as_ref()
            .map_or(0, |u| u.table.lock().unwrap().len())
    }

    /// `uid`'s context was refused and no new one could be made (its
    /// ticket ran out): the uid's calls fail at once for a moment, then
    /// its cache is tried afresh; this is logged once.
    fn user_refused(&self, users: &Users, uid: u32, sec: &Arc<GssSec>, e: &ClientError) {
        let now = Instant::now();
        let mut t = users.table.lock().unwrap();
        // Another call may have replaced it already.
        let Found::Live(cur) = t.find(uid, now) else {
            return;
        };
        if !Arc::ptr_eq(&cur, sec) {
            return;
        }
        let first = t.refuse(uid, now);
        drop(t);
        if first {
            tracing::warn!(
                uid,
                principal = sec.current().principal(),
                "the Kerberos credential of uid {uid} no longer works ({e}) and its cache holds \
                 no usable ticket: its NFS calls fail with EACCES until it has one (kinit)"
            );
        }
        end_user(cur);
    }

    /// `uid`'s context: the live one, or one made now from its cache.
    async fn user_sec(&self, users: &Users, uid: u32) -> Result<Arc<GssSec>, ClientError> {
        if let Some(known) = users.known(uid) {
            return known;
        }
        let making = users.making.lock().unwrap().entry(uid).or_default().clone();
        let _making = making.lock().await;
        let r = self.make_user_sec(users, uid).await;
        users.making.lock().unwrap().remove(&uid);
        r
    }

    async fn make_user_sec(&self, users: &Users, uid: u32) -> Result<Arc<GssSec>, ClientError> {
        if let Some(known) = users.known(uid) {
            return known;
        }
        let (ccname, from) = match rpc::client::current_caller_pid().and_then(ccache::of_process) {
            Some(c) => (c, "the caller's KRB5CCNAME"),
            None => (ccache::default_for(uid), "the default"),
        };
        let rpc = match &self.channel {
            Some(ch) => ch.any_connection().await?,
            None => self.rpc.clone(),
        };
        let made = GssSec::make_sec(
            rpc,
            self.channel.clone(),
            GssTarget {
                prog: self.prog,
                vers: self.vers,
                service: self.service,
                target: &self.target,
                policy: self.policy,
            },
            Source::User {
                uid,
                ccname: ccname.clone(),
            },
            None,
            Some(self.trouble.clone()),
        )
        .await;
        let now = Instant::now();
        match made {
            Ok(sec) => {
                tracing::info!(
                    uid,
                    principal = sec.current().principal(),
                    "RPCSEC_GSS context for uid {uid} from {ccname} ({from})"
                );
                let gone = users.table.lock().unwrap().insert(uid, sec.clone(), now);
                gone.into_iter().for_each(end_user);
                Ok(sec)
            }
            Err(e) => {
                if users.table.lock().unwrap().refuse(uid, now) {
                    tracing::warn!(
                        uid,
                        "no usable Kerberos credential for uid {uid} ({ccname}, {from}): {e}; \
                         its NFS calls fail with EACCES until it has one (kinit)"
                    );
                }
                Err(no_credential())
            }
        }
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

    /// Changes each time renewal warns (the value counts the warnings,
    /// those about the contexts of the users it acts for included).
    /// A writer holding unstable data should COMMIT it when this changes:
    /// the current context still works, but may not for long.
    pub fn trouble(&self) -> tokio::sync::watch::Receiver<u64> {
        self.trouble.subscribe()
    }

    fn warn(&self) {
        self.warnings.fetch_add(1, Ordering::Relaxed);
        self.trouble.send_modify(|n| *n += 1);
    }

    /// Calls `proc_` with encoded `args` under the current context, or,
    /// inside [`rpc::client::as_caller`], under the calling user's.
    pub async fn call(&self, proc_: u32, args: &[u8]) -> Result<Decoder, ClientError> {
        if let Some((users, uid)) = self.acting_for() {
            let sec = self.user_sec(users, uid).await?;
            let r = sec.call_own(proc_, args).await;
            if let Err(e) = &r {
                if refused_context(e) {
                    self.user_refused(users, uid, &sec, e);
                }
            }
            return r;
        }
        self.call_own(proc_, args).await
    }

    /// [`GssSec::call`] under this [`GssSec`]'s own current context.
    async fn call_own(&self, proc_: u32, args: &[u8]) -> Result<Decoder, ClientError> {
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
                        // (A user's is logged once by its client.)
                        if matches!(self.source, Source::Own) {
                            tracing::warn!(
                                principal = ctx.principal(),
                                "RPCSEC_GSS context refused and no new one can be made: {why}"
                            );
                        }
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
            Some(ch) => ch.any_connection().await?,
            None => self.rpc.clone(),
        };
        make_ctx(rpc, self.prog, self.vers, &self.target, &self.source).await
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

/// Ends a user's [`GssSec`] dropped from the table: its context is
/// destroyed on the server once the calls on it are done (its renewal
/// stops when the last call lets go of it).
fn end_user(sec: Arc<GssSec>) {
    tokio::spawn(retire(sec.current()));
}

/// Drops the users' contexts that have been idle too long.
async fn sweep_loop(sec: Weak<GssSec>) {
    loop {
        let every = {
            let Some(s) = sec.upgrade() else { return };
            let Some(u) = &s.users else { return };
            let limits = u.table.lock().unwrap().limits();
            (limits.idle / 4).max(Duration::from_secs(1))
        };
        tokio::time::sleep(every).await;
        let Some(s) = sec.upgrade() else { return };
        let Some(u) = &s.users else { return };
        let gone = u.table.lock().unwrap().sweep(Instant::now());
        for g in gone {
            tracing::debug!(
                principal = g.current().principal(),
                "RPCSEC_GSS context of an idle user dropped"
            );
            end_user(g);
        }
    }
}

async fn renew_loop(sec: Weak<GssSec>, mut next: Instant) {
    loop {
        tokio::time::sleep_until(next.into()).await;
        let Some(s) = sec.upgrade() else { return };
        let _making = s.making.lock().await;
        let old = s.current();
        if matches!(s.source, Source::User { .. }) && Instant::now() >= old.expires() {
            // A user's context that ran out is not kept trying for (and
            // warned about) every second: the user's next call makes a
            // fresh one from the cache, or is refused (logged once).
            return;
        }
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
