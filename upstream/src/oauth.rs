//! OAUTHBEARER tokens from an OAuth 2.0 token endpoint: the
//! client-credentials grant (RFC 6749 section 4.4), as Kafka's
//! `OAuthBearerLoginCallbackHandler` does it.
//!
//! One [`TokenSource`] per cluster asks the endpoint with HTTP/1.1 (TLS
//! for `https`), the client id and secret as Basic authentication, and
//! keeps the token until 80% of its lifetime has passed; every new
//! connection and every re-authentication (KIP-368) takes the token kept.
//! The answer's parsing ([`parse_response`]) is the part that reads bytes
//! from outside, and is fuzzed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use strait_config::{ClientTls, OAuthClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::security::{client_config, read_secret};

/// Largest token endpoint answer read.
const MAX_ANSWER: usize = 1 << 20;

/// How long one token request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The share of a token's lifetime after which a new one is asked for
/// (Kafka's `sasl.login.refresh.window.factor`).
const REFRESH_AT: f64 = 0.8;

/// Lifetime assumed for a token whose answer gives none.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// Tokens of one cluster's `oauth:`.
pub(crate) struct TokenSource {
    client: OAuthClient,
    endpoint: Endpoint,
    tls: Option<Arc<ClientConfig>>,
    /// The token kept, and when to ask for a new one.
    kept: Mutex<Option<(String, Instant)>>,
}

/// A token endpoint's address, taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    https: bool,
    host: String,
    port: u16,
    /// The path and query, `/` at least.
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Endpoint, String> {
        let (https, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            _ => return Err(format!("`{url}` is not an http:// or https:// address")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let default_port = if https { 443 } else { 80 };
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !port.contains(']') => (
                host,
                port.parse::<u16>()
                    .map_err(|_| format!("`{url}`: `{port}` is not a port"))?,
            ),
            _ => (authority, default_port),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("`{url}` names no host"));
        }
        Ok(Endpoint {
            https,
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }

    /// The `Host` header's value.
    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.https, self.port) {
            (true, 443) | (false, 80) => host,
            (_, port) => format!("{host}:{port}"),
        }
    }
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSource")
            .field("token_endpoint", &self.client.token_endpoint)
            .field("client_id", &self.client.client_id)
            .finish()
    }
}

impl TokenSource {
    /// The source of `client`'s tokens; reads its CA file.
    pub(crate) fn new(client: &OAuthClient) -> Result<TokenSource, String> {
        let endpoint =
            Endpoint::parse(&client.token_endpoint).map_err(|e| format!("sasl.oauth.token_endpoint: {e}"))?;
        let tls = if endpoint.https {
            let settings = ClientTls {
                ca_file: client.ca_file.clone(),
                ..ClientTls::default()
            };
            let config = client_config(&settings).map_err(|e| format!("sasl.oauth: {e}"))?;
            Some(Arc::new(config))
        } else {
            None
        };
        Ok(TokenSource {
            client: client.clone(),
            endpoint,
            tls,
            kept: Mutex::new(None),
        })
    }

    /// A token: the one kept while it is fresh, else a new one from the
    /// endpoint. An error says what the endpoint or the way to it did.
    pub(crate) async fn token(&self) -> Result<String, String> {
        let mut kept = self.kept.lock().await;
        if let Some((token, refresh)) = kept.as_ref() {
            if Instant::now() < *refresh {
                return Ok(token.clone());
            }
        }
        let asked = Instant::now();
        let (token, lifetime) = tokio::time::timeout(REQUEST_TIMEOUT, self.ask())
            .await
            .map_err(|_| {
                format!(
                    "the token endpoint {} did not answer within {REQUEST_TIMEOUT:?}",
                    self.client.token_endpoint
                )
            })??;
        let lifetime = lifetime.map_or(DEFAULT_LIFETIME, Duration::from_secs);
        *kept = Some((token.clone(), asked + lifetime.mul_f64(REFRESH_AT)));
        tracing::debug!(endpoint = %self.client.token_endpoint, ?lifetime, "OAuth token obtained");
        Ok(token)
    }

    /// One token request: the token and its lifetime in seconds.
    async fn ask(&self) -> Result<(String, Option<u64>), String> {
        let endpoint = &self.endpoint;
        let secret = read_secret(&self.client.client_secret).await?;
        let form = |text: &str| form_encode(text);
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            form(&self.client.client_id),
            form(&secret)
        ));
        let mut body = "grant_type=client_credentials".to_owned();
        if let Some(scope) = &self.client.scope {
            body += &format!("&scope={}", form(scope));
        }
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Basic {basic}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nAccept: application/json\r\n\
             Content-Length: {length}\r\nConnection: close\r\nUser-Agent: strait/{version}\r\n\r\n{body}",
            path = endpoint.path,
            host = endpoint.host_header(),
            length = body.len(),
            version = env!("CARGO_PKG_VERSION"),
        );
        let place = format!("the token endpoint {}", self.client.token_endpoint);
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("cannot connect to {place}: {e}"))?;
        let answer = match &self.tls {
            None => exchange(tcp, request.as_bytes()).await,
            Some(config) => {
                let name = ServerName::try_from(endpoint.host.clone())
                    .map_err(|e| format!("{place}: `{}` is not a TLS server name: {e}", endpoint.host))?;
                let stream = tokio_rustls::TlsConnector::from(Arc::clone(config))
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {place} failed: {e}"))?;
                exchange(stream, request.as_bytes()).await
            }
        }
        .map_err(|e| format!("asking {place}: {e}"))?;
        parse_response(&answer).map_err(|e| format!("{place}: {e}"))
    }
}

/// Sends `request` and reads the answer until the server closes (at most
/// [`MAX_ANSWER`] bytes).
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
) -> std::io::Result<Vec<u8>> {
    stream.write_all(request).await?;
    stream.flush().await?;
    let mut answer = Vec::new();
    let mut limited = (&mut stream).take(MAX_ANSWER as u64 + 1);
    match limited.read_to_end(&mut answer).await {
        Ok(_) => {}
        // Servers that close TLS without close_notify: what came is kept.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {}
        Err(e) => return Err(e),
    }
    if answer.len() > MAX_ANSWER {
        return Err(std::io::Error::other(format!(
            "the answer is longer than {MAX_ANSWER} bytes"
        )));
    }
    Ok(answer)
}

/// `text` encoded for an `application/x-www-form-urlencoded` body (and for
/// Basic authentication, as RFC 6749 section 2.3.1 asks).
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => out.push(byte as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

/// The token and its lifetime (`expires_in`, seconds) of a token
/// endpoint's whole HTTP/1.1 answer; an error names what was wrong (the
/// endpoint's own `error` and `error_description` when it refused).
pub fn parse_response(answer: &[u8]) -> Result<(String, Option<u64>), String> {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the answer is not HTTP (no end of headers)")?;
    let head = std::str::from_utf8(&answer[..end]).map_err(|_| "the answer's headers are not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, status) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    if !version.starts_with("HTTP/1.") {
        return Err(format!("the answer is not HTTP/1.x: `{}`", truncate(status_line)));
    }
    let status: u16 = status
        .parse()
        .map_err(|_| format!("no status in `{}`", truncate(status_line)))?;
    let mut chunked = false;
    let mut length: Option<usize> = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse()
                    .map_err(|_| format!("Content-Length `{}` is not a number", truncate(value)))?,
            );
        }
    }
    let rest = &answer[end + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        match length {
            Some(n) if n > rest.len() => {
                return Err(format!("the answer ends after {} of its {n} bytes", rest.len()))
            }
            Some(n) => rest[..n].to_vec(),
            None => rest.to_vec(),
        }
    };
    let json: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        format!(
            "HTTP {status}, and the body is not JSON ({e}): {}",
            truncate(&String::from_utf8_lossy(&body))
        )
    })?;
    if status != 200 {
        let field = |key: &str| {
            json.get(key)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        return Err(format!(
            "refused the client credentials: HTTP {status} {} {}",
            field("error"),
            field("error_description")
        )
        .trim_end()
        .to_owned());
    }
    let token = json
        .get("access_token")
        .and_then(|v| v.as_str())
        .filter(|t| !t.is_empty())
        .ok_or("the answer holds no access_token")?;
    let lifetime = json
        .get("expires_in")
        .and_then(|v| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok())));
    Ok((token.to_owned(), lifetime))
}

/// A chunked body (RFC 9112 section 7.1) put together.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk's size line does not end")?;
        let line = std::str::from_utf8(&rest[..line_end]).map_err(|_| "a chunk's size is not text")?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| format!("`{}` is not a chunk size", truncate(size)))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size {
            return Err("the answer ends inside a chunk".to_owned());
        }
        body.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).ok_or("a chunk does not end with CRLF")?;
    }
}

/// At most 200 characters of `text`, for messages.
fn truncate(text: &str) -> &str {
    match text.char_indices().nth(200) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_taken_apart() {
        assert_eq!(
            Endpoint::parse("https://idp.example.com/oauth2/token?x=1").unwrap(),
            Endpoint {
                https: true,
                host: "idp.example.com".into(),
                port: 443,
                path: "/oauth2/token?x=1".into()
            }
        );
        let local = Endpoint::parse("http://[::1]:8080").unwrap();
        assert_eq!(
            (local.host.as_str(), local.port, local.path.as_str()),
            ("::1", 8080, "/")
        );
        assert_eq!(local.host_header(), "[::1]:8080");
        assert!(Endpoint::parse("ftp://x").is_err());
        assert!(Endpoint::parse("http://:80/").is_err());
        assert!(Endpoint::parse("http://h:port/").is_err());
    }

    #[test]
    fn answers_are_read_plain_and_chunked() {
        let body = r#"{"access_token":"abc","expires_in":3599,"x":1}"#;
        let plain = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(
            parse_response(plain.as_bytes()).unwrap(),
            ("abc".into(), Some(3599))
        );
        let (first, second) = body.split_at(5);
        let chunked = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n{:x};ext=1\r\n{second}\r\n0\r\n\r\n",
            first.len(),
            second.len()
        );
        assert_eq!(
            parse_response(chunked.as_bytes()).unwrap(),
            ("abc".into(), Some(3599))
        );
        let refused = b"HTTP/1.1 401 Unauthorized\r\n\r\n{\"error\":\"invalid_client\",\"error_description\":\"bad secret\"}";
        let e = parse_response(refused).unwrap_err();
        assert!(e.contains("HTTP 401 invalid_client bad secret"), "{e}");
        for broken in [
            &b"garbage"[..],
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\n\r\n{}",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nff\r\n{}",
        ] {
            assert!(
                parse_response(broken).is_err(),
                "{:?}",
                String::from_utf8_lossy(broken)
            );
        }
    }

    #[test]
    fn form_encoding_escapes_what_it_must() {
        assert_eq!(form_encode("a b:c/d~é"), "a+b%3Ac%2Fd%7E%C3%A9");
    }
}
