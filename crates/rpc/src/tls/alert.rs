//! TLS failures as a user reads them: alert names and short reasons
//! for failed handshakes (the labels of the metrics).

use tokio_rustls::rustls;

/// A TLS alert by its name in RFC 8446 (`unknown_ca`,
/// `certificate_required`, ...), for errors a user reads.
pub fn alert_name(a: rustls::AlertDescription) -> String {
    use rustls::AlertDescription as A;
    let n = match a {
        A::UnknownCA => "unknown_ca",
        A::CertificateRequired => "certificate_required",
        A::BadCertificate => "bad_certificate",
        A::CertificateExpired => "certificate_expired",
        A::CertificateRevoked => "certificate_revoked",
        A::CertificateUnknown => "certificate_unknown",
        A::UnsupportedCertificate => "unsupported_certificate",
        A::AccessDenied => "access_denied",
        A::HandshakeFailure => "handshake_failure",
        A::ProtocolVersion => "protocol_version",
        A::NoApplicationProtocol => "no_application_protocol",
        A::DecryptError => "decrypt_error",
        A::InternalError => "internal_error",
        other => return format!("{other:?}"),
    };
    n.to_string()
}

/// Every label [`failure_reason`] and the server give a failed handshake
/// (the metrics keep one counter each).
pub const FAILURE_REASONS: [&str; 12] = [
    "no-client-certificate",
    "unknown-ca",
    "expired-certificate",
    "name-mismatch",
    "bad-certificate",
    "alert-received",
    "incompatible",
    "no-alpn",
    "other",
    "closed",
    "io",
    "timeout",
];

/// A short label for why a handshake failed, for metrics and logs.
pub fn failure_reason(e: &std::io::Error) -> &'static str {
    use rustls::{CertificateError as C, Error as E};
    let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "closed",
            _ => "io",
        };
    };
    match t {
        E::NoCertificatesPresented => "no-client-certificate",
        E::InvalidCertificate(C::UnknownIssuer) => "unknown-ca",
        // webpki reports expiry with its context (the times).
        E::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => "expired-certificate",
        E::InvalidCertificate(C::NotValidForName) => "name-mismatch",
        E::InvalidCertificate(_) => "bad-certificate",
        E::AlertReceived(_) => "alert-received",
        E::PeerIncompatible(_) => "incompatible",
        E::NoApplicationProtocol => "no-alpn",
        _ => "other",
    }
}
