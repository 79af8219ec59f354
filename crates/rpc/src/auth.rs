//! Credentials: AUTH_NONE and AUTH_SYS (RFC 5531 appendix A); RPCSEC_GSS
//! calls are authenticated by [`crate::gss`] and arrive here as [`Auth::Gss`].

use bytes::Bytes;
use proto::rpc::{AuthStat, AuthsysParms, OpaqueAuth, AUTH_NONE, AUTH_SYS};
use xdr::{Decoder, Unpack};

/// AUTH_SYS credentials as the client sent them (squashing is the server's business).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSys {
    pub stamp: u32,
    pub machinename: Bytes,
    pub uid: u32,
    pub gid: u32,
    /// At most 16, as RFC 5531 allows; more is AUTH_BADCRED.
    pub gids: Vec<u32>,
}

/// An RPCSEC_GSS caller, authenticated by its context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthGss {
    /// `user@REALM` or `nfs/host@REALM`.
    pub principal: std::sync::Arc<str>,
    pub service: crate::gss::GssService,
    /// The local identity the principal maps to (None: anonymous).
    pub ids: Option<crate::gss::Ids>,
}

/// The caller's credential, checked for form (not yet for permission).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Sys(AuthSys),
    Gss(AuthGss),
}

impl Auth {
    /// Parses a call's credential. The error is the auth_stat to reply with.
    pub fn from_cred(cred: &OpaqueAuth) -> Result<Auth, AuthStat> {
        match cred.flavor {
            AUTH_NONE => Ok(Auth::None),
            AUTH_SYS => {
                let mut d = Decoder::new(cred.body.clone());
                let p = AuthsysParms::unpack(&mut d).map_err(|_| AuthStat::AUTH_BADCRED)?;
                if d.remaining() != 0 {
                    return Err(AuthStat::AUTH_BADCRED);
                }
                Ok(Auth::Sys(AuthSys {
                    stamp: p.stamp,
                    machinename: p.machinename,
                    uid: p.uid,
                    gid: p.gid,
                    gids: p.gids,
                }))
            }
            // Flavors this server does not speak (AUTH_DH, AUTH_SHORT...;
            // RPCSEC_GSS when no keytab is configured): Linux's sunrpc
            // answers BADCRED too.
            _ => Err(AuthStat::AUTH_BADCRED),
        }
    }

    pub fn flavor(&self) -> u32 {
        match self {
            Auth::None => AUTH_NONE,
            Auth::Sys(_) => AUTH_SYS,
            Auth::Gss(_) => proto::rpc::RPCSEC_GSS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sys_cred(ngids: usize) -> OpaqueAuth {
        let p = AuthsysParms {
            stamp: 1,
            machinename: Bytes::from_static(b"host"),
            uid: 1000,
            gid: 100,
            gids: (0..ngids as u32).collect(),
        };
        OpaqueAuth {
            flavor: AUTH_SYS,
            body: xdr::to_bytes(&p),
        }
    }

    #[test]
    fn sixteen_gids_ok_seventeen_badcred() {
        assert!(matches!(Auth::from_cred(&sys_cred(16)), Ok(Auth::Sys(s)) if s.gids.len() == 16));
        // 17 gids make the body 4 bytes longer than 400? Not necessarily: it is
        // the <16> bound that must refuse it.
        assert_eq!(Auth::from_cred(&sys_cred(17)), Err(AuthStat::AUTH_BADCRED));
    }

    #[test]
    fn unknown_flavor_and_trailing_bytes_are_badcred() {
        let c = OpaqueAuth {
            flavor: 390003,
            body: Bytes::new(),
        };
        assert_eq!(Auth::from_cred(&c), Err(AuthStat::AUTH_BADCRED));
        let mut c = sys_cred(1);
        let mut b = c.body.to_vec();
        b.extend_from_slice(&[0, 0, 0, 0]);
        c.body = b.into();
        assert_eq!(Auth::from_cred(&c), Err(AuthStat::AUTH_BADCRED));
    }
}
