//! A broker connection's byte stream: plain TCP or TLS over it, and its
//! two halves for the connection's reader and writer tasks. Plain TCP
//! splits without a lock; TLS, one session for both directions, through
//! tokio's split.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// An open connection's stream.
#[derive(Debug)]
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The half the reader task reads answers from.
#[derive(Debug)]
pub(crate) enum Reader {
    Plain(OwnedReadHalf),
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

/// The half the writer task writes requests to.
#[derive(Debug)]
pub(crate) enum Writer {
    Plain(OwnedWriteHalf),
    Tls(WriteHalf<TlsStream<TcpStream>>),
}

impl Stream {
    pub(crate) fn into_split(self) -> (Reader, Writer) {
        match self {
            Stream::Plain(tcp) => {
                let (read, write) = tcp.into_split();
                (Reader::Plain(read), Writer::Plain(write))
            }
            Stream::Tls(tls) => {
                let (read, write) = tokio::io::split(*tls);
                (Reader::Tls(read), Writer::Tls(write))
            }
        }
    }
}

/// Forwards a call to whichever stream `$self` holds.
macro_rules! either {
    ($self:expr, $s:ident => $call:expr) => {
        match $self.get_mut() {
            Self::Plain($s) => {
                let $s = Pin::new($s);
                $call
            }
            Self::Tls($s) => {
                let $s = Pin::new($s);
                $call
            }
        }
    };
}

/// AsyncRead for an enum whose variants all read.
macro_rules! read_impl {
    ($ty:ty) => {
        impl AsyncRead for $ty {
            fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
                either!(self, s => s.poll_read(cx, buf))
            }
        }
    };
}

/// AsyncWrite for an enum whose variants all write, vectored writes kept
/// (a Produce's frame is written as its chunks).
macro_rules! write_impl {
    ($ty:ty) => {
        impl AsyncWrite for $ty {
            fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                either!(self, s => s.poll_write(cx, buf))
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                either!(self, s => s.poll_write_vectored(cx, bufs))
            }

            fn is_write_vectored(&self) -> bool {
                match self {
                    Self::Plain(s) => s.is_write_vectored(),
                    Self::Tls(s) => s.is_write_vectored(),
                }
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                either!(self, s => s.poll_flush(cx))
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                either!(self, s => s.poll_shutdown(cx))
            }
        }
    };
}

read_impl!(Stream);
read_impl!(Reader);
write_impl!(Stream);
write_impl!(Writer);
