//! A fault-injecting HTTP proxy for tests (feature `test-server`): listens on a loopback port,
//! forwards each request to an S3 server on a connection of its own, and spoils the answers the
//! test asks for: a status of its choosing instead of the server's (500, 503), an answer held
//! back for a while, or an answer cut off part way through its body.
//!
//! One request per client connection: the proxy answers with `Connection: close`, so a client
//! opens a new connection for its next request and every request passes through the plan.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What to do to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and an empty body, without asking the server.
    Status(u16),
    /// Forward it, and hold the answer back this long.
    Delay(Duration),
    /// Forward it, and send only the headers and the first half of the body, then close.
    Truncate,
}

#[derive(Default)]
struct Plan {
    /// Faults for the next requests, in order; one is used per request.
    next: VecDeque<Fault>,
    /// A fault for every request once `next` is empty.
    always: Option<Fault>,
}

/// A running proxy; it stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    plan: Arc<Mutex<Plan>>,
    requests: Arc<AtomicU64>,
    faults: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl FaultProxy {
    /// Starts a proxy to the server at `upstream` (`host:port`).
    pub fn start(upstream: &str) -> std::io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let upstream = upstream.to_string();
        let plan = Arc::new(Mutex::new(Plan::default()));
        let requests = Arc::new(AtomicU64::new(0));
        let faults = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, r, f, s) = (plan.clone(), requests.clone(), faults.clone(), stop.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let (p, r, f, upstream) = (p.clone(), r.clone(), f.clone(), upstream.clone());
                std::thread::spawn(move || {
                    let _ = serve(client, &upstream, &p, &r, &f);
                });
            }
        });
        Ok(FaultProxy {
            addr,
            plan,
            requests,
            faults,
            stop,
        })
    }

    /// The proxy's endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Spoils the next requests, one fault each, in order.
    pub fn next(&self, faults: impl IntoIterator<Item = Fault>) {
        self.plan.lock().expect("plan lock").next.extend(faults);
    }

    /// Spoils every request from now on (after those queued by [`FaultProxy::next`]), or none.
    pub fn always(&self, fault: Option<Fault>) {
        self.plan.lock().expect("plan lock").always = fault;
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Requests spoiled so far.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Reads an HTTP message head (up to the blank line) and returns it with whatever of the body
/// came with it.
fn read_head(stream: &mut TcpStream) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let body = buf.split_off(end + 4);
            return Ok((buf, body));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The value of header `name` in `head`, if present.
fn header(head: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(head).lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// `head` with its `Connection` header replaced by `Connection: close`.
fn closing(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut out = String::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        let is_connection = line
            .split_once(':')
            .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"));
        if !is_connection {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out.into_bytes()
}

fn serve(
    mut client: TcpStream,
    upstream: &str,
    plan: &Mutex<Plan>,
    requests: &AtomicU64,
    faults: &AtomicU64,
) -> std::io::Result<()> {
    let (head, mut body) = read_head(&mut client)?;
    let length: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while body.len() < length {
        let mut chunk = vec![0u8; (length - body.len()).min(1 << 20)];
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    requests.fetch_add(1, Ordering::SeqCst);
    let fault = {
        let mut p = plan.lock().expect("plan lock");
        p.next.pop_front().or_else(|| p.always.clone())
    };
    if fault.is_some() {
        faults.fetch_add(1, Ordering::SeqCst);
    }
    if let Some(Fault::Status(code)) = fault {
        let answer =
            format!("HTTP/1.1 {code} Injected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        client.write_all(answer.as_bytes())?;
        return client.shutdown(Shutdown::Both);
    }
    let mut server = TcpStream::connect(upstream)?;
    server.write_all(&closing(&head))?;
    server.write_all(&body)?;
    let (answer_head, mut answer) = read_head(&mut server)?;
    server.read_to_end(&mut answer)?;
    match fault {
        Some(Fault::Delay(d)) => std::thread::sleep(d),
        Some(Fault::Truncate) => answer.truncate(answer.len() / 2),
        _ => {}
    }
    client.write_all(&closing(&answer_head))?;
    client.write_all(&answer)?;
    client.shutdown(Shutdown::Both)
}
