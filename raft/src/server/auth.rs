//! Who may talk to a node: the bearer-token check every request passes when a token is set,
//! and the rustls server configuration from PEM files.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum_server::tls_rustls::RustlsConfig;

use super::api::{error, App};
use super::ServeError;

/// Answer 401 unless the request carries `Authorization: Bearer <token>` (when a token is set).
pub(crate) async fn require_token(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let Some(token) = app.token.as_deref() else {
        return next.run(req).await;
    };
    let sent = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match sent.and_then(|v| v.strip_prefix("Bearer ")) {
        Some(t) if same(t.as_bytes(), token.as_bytes()) => next.run(req).await,
        _ => error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token"),
    }
}

/// Compare without stopping at the first difference (the time does not tell how much matched).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The rustls configuration from a PEM certificate chain and key (ring as the crypto provider).
pub(crate) async fn load_tls(cert: &Path, key: &Path) -> Result<RustlsConfig, ServeError> {
    // Already installed (an earlier node in this process) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(|e| ServeError::Tls { path: cert.to_path_buf(), reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_compare_by_content_and_length() {
        assert!(super::same(b"abc", b"abc"));
        assert!(!super::same(b"abc", b"abd"));
        assert!(!super::same(b"abc", b"abcd"));
    }
}
