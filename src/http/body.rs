//! Request bodies: read within a limit that each refusal names, and kept
//! as they arrive, so the memory a body takes follows the bytes actually
//! received (never a growing vector's doubling, never a declared length
//! alone).

use std::io::Read;

use crate::limits::{STEP_RESULT_BYTES_MAX, WEBHOOK_BODY_BYTES_MAX};

use super::error::ApiError;

/// A cap on one kind of request body, and how its refusal names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyLimit {
    /// What is capped, as the refusal says it: "webhook bodies".
    pub what: &'static str,
    pub bytes: usize,
}

impl BodyLimit {
    /// GitHub's documented payload cap (`limits::WEBHOOK_BODY_BYTES_MAX`).
    pub const WEBHOOK: BodyLimit = BodyLimit {
        what: "webhook bodies",
        bytes: WEBHOOK_BODY_BYTES_MAX,
    };
    /// A dispatch is a run name, a repository, a revision and a few inputs.
    pub const DISPATCH: BodyLimit = BodyLimit {
        what: "dispatch requests",
        bytes: super::dispatch::DISPATCH_BODY_BYTES_MAX,
    };
    /// An event's payload is journaled as its wait's result, so it is
    /// capped as a step result is (ADR-0001).
    /// (ADR-0001: docs/adr/0001-durable-execution-scope.md)
    pub const EVENT: BodyLimit = BodyLimit {
        what: "event payloads",
        bytes: STEP_RESULT_BYTES_MAX,
    };
    /// A dashboard form posts a few fields; an action form with an event
    /// payload is bounded by the event cap and a few fields. Larger is not
    /// from a page.
    pub const FORM: BodyLimit = BodyLimit {
        what: "dashboard forms",
        bytes: STEP_RESULT_BYTES_MAX + 4 * 1024,
    };

    /// 413, naming this limit.
    pub fn too_large(&self) -> ApiError {
        ApiError::new(
            413,
            "payload_too_large",
            format!("{} are at most {} bytes", self.what, self.bytes),
        )
    }

    /// The declared `Content-Length`: refused (413) before a byte is read
    /// when it is over the limit; None when absent or not a number (the
    /// body's real length is capped as it streams).
    pub fn declared(&self, content_length: Option<&str>) -> Result<Option<usize>, ApiError> {
        match content_length.and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(n) if n > self.bytes as u64 => Err(self.too_large()),
            Some(n) => Ok(usize::try_from(n).ok()),
            None => Ok(None),
        }
    }
}

/// The most one part of a body reserves at once: a delivery of GitHub's
/// usual size (tens of KiB) is one part, allocated once from its declared
/// length; a larger one grows a part at a time, so a sender that declares
/// 25 MiB and sends little makes the Worker reserve at most this.
pub const BODY_PART_BYTES: usize = 1024 * 1024;
/// A body without a declared length starts with a part this large (it
/// grows by `BODY_PART_BYTES` after): most are small.
pub const BODY_FIRST_PART_BYTES_UNDECLARED: usize = 64 * 1024;

const _: () = assert!(BODY_FIRST_PART_BYTES_UNDECLARED <= BODY_PART_BYTES);

/// A body kept as parts that are never reallocated: each is filled up to
/// the capacity it was made with, then the next one starts. Memory is the
/// bytes received plus at most one part's unfilled room.
#[derive(Debug)]
pub struct Body {
    parts: Vec<Vec<u8>>,
    len: usize,
    limit: BodyLimit,
}

impl Body {
    /// An empty body under `limit`, its first part sized from the declared
    /// length (within the limit and `BODY_PART_BYTES`).
    pub fn new(limit: BodyLimit, declared: Option<usize>) -> Body {
        let first = declared
            .unwrap_or(BODY_FIRST_PART_BYTES_UNDECLARED)
            .min(BODY_PART_BYTES)
            .min(limit.bytes);
        Body {
            parts: vec![Vec::with_capacity(first)],
            len: 0,
            limit,
        }
    }

    /// Appends a chunk; 413 naming the limit as soon as the body would pass
    /// it (the chunk is not kept).
    pub fn extend(&mut self, mut chunk: &[u8]) -> Result<(), ApiError> {
        if self.len.saturating_add(chunk.len()) > self.limit.bytes {
            return Err(self.limit.too_large());
        }
        self.len += chunk.len();
        // Bounded by the chunk: every pass stores at least one byte, since
        // a full last part is followed by a fresh one with room.
        while !chunk.is_empty() {
            let room = self
                .parts
                .last()
                .map_or(0, |p| p.capacity().saturating_sub(p.len()));
            if room == 0 {
                let left = self.limit.bytes.saturating_sub(self.stored());
                self.parts
                    .push(Vec::with_capacity(BODY_PART_BYTES.min(left).max(1)));
                continue;
            }
            let (now, rest) = chunk.split_at(room.min(chunk.len()));
            if let Some(part) = self.parts.last_mut() {
                part.extend_from_slice(now);
            }
            chunk = rest;
        }
        Ok(())
    }

    fn stored(&self) -> usize {
        self.parts.iter().map(Vec::len).sum()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many parts hold it (one for a body within its declared length
    /// and `BODY_PART_BYTES`).
    pub fn parts(&self) -> usize {
        self.parts.iter().filter(|p| !p.is_empty()).count().max(1)
    }

    /// The bytes reserved for it: what it received plus the last part's
    /// unfilled room.
    pub fn reserved_bytes(&self) -> usize {
        self.parts.iter().map(Vec::capacity).sum()
    }

    /// The body in one slice when it is one part.
    pub fn as_slice(&self) -> Option<&[u8]> {
        match self.parts.as_slice() {
            [only] => Some(only),
            [] => Some(&[]),
            _ => None,
        }
    }

    /// Reads the body across its parts (for a parser), copying nothing.
    pub fn reader(&self) -> impl Read + '_ {
        PartsReader {
            parts: &self.parts,
            at: 0,
            offset: 0,
        }
    }

    /// The body as one vector: for small limits (a form, a dispatch), where
    /// one copy costs nothing worth avoiding.
    pub fn into_vec(self) -> Vec<u8> {
        if self.parts.len() == 1 {
            return self.parts.into_iter().next().unwrap_or_default();
        }
        self.parts.concat()
    }
}

struct PartsReader<'a> {
    parts: &'a [Vec<u8>],
    at: usize,
    offset: usize,
}

impl Read for PartsReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // Bounded by the parts: each pass copies bytes or moves to the next.
        while let Some(part) = self.parts.get(self.at) {
            let left = &part[self.offset.min(part.len())..];
            if left.is_empty() {
                self.at += 1;
                self.offset = 0;
                continue;
            }
            let n = left.len().min(buf.len());
            buf[..n].copy_from_slice(&left[..n]);
            self.offset += n;
            return Ok(n);
        }
        Ok(0)
    }
}

/// Reads a request body in chunks within `limit`, refusing it (413, naming
/// the limit) as soon as it passes it: a chunked body without
/// `Content-Length` is never gathered whole first.
pub async fn read_capped<S, E>(
    mut chunks: S,
    limit: BodyLimit,
    declared: Option<usize>,
) -> Result<Body, ApiError>
where
    S: futures_util::Stream<Item = Result<Vec<u8>, E>> + Unpin,
    E: std::fmt::Display,
{
    use futures_util::StreamExt;
    let mut body = Body::new(limit, declared);
    // Bounded by `limit`: every chunk adds bytes until the stream ends or
    // the body passes the limit.
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
        body.extend(&chunk)?;
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: BodyLimit = BodyLimit {
        what: "test bodies",
        bytes: 10,
    };

    #[test]
    fn each_limit_names_itself() {
        for (limit, words) in [
            (
                BodyLimit::WEBHOOK,
                "webhook bodies are at most 26214400 bytes",
            ),
            (
                BodyLimit::DISPATCH,
                "dispatch requests are at most 65536 bytes",
            ),
            (BodyLimit::FORM, "dashboard forms are at most 1052672 bytes"),
            (BodyLimit::EVENT, "event payloads are at most 1048576 bytes"),
        ] {
            let e = limit.too_large();
            assert_eq!(
                (e.status, e.code, e.message.as_str()),
                (413, "payload_too_large", words)
            );
            let over = (limit.bytes + 1).to_string();
            assert_eq!(limit.declared(Some(&over)).unwrap_err().message, words);
            let at = limit.bytes.to_string();
            assert_eq!(limit.declared(Some(&at)).unwrap(), Some(limit.bytes));
        }
        assert_eq!(SMALL.declared(Some("not a number")).unwrap(), None);
        assert_eq!(SMALL.declared(None).unwrap(), None);
    }

    #[test]
    fn parts_are_filled_never_reallocated_and_read_back_whole() {
        let mut body = Body::new(SMALL, Some(4));
        body.extend(b"ab").unwrap();
        body.extend(b"cdef").unwrap();
        assert_eq!(body.len(), 6);
        assert_eq!(body.parts(), 2, "the declared 4 bytes, then a new part");
        assert!(body.as_slice().is_none());
        let mut text = String::new();
        body.reader().read_to_string(&mut text).unwrap();
        assert_eq!(text, "abcdef");
        assert_eq!(
            body.extend(b"12345").unwrap_err().message,
            "test bodies are at most 10 bytes"
        );
        assert_eq!(body.into_vec(), b"abcdef");
        let mut one = Body::new(SMALL, Some(3));
        one.extend(b"xyz").unwrap();
        assert_eq!(one.as_slice(), Some(&b"xyz"[..]));
    }

    #[test]
    fn a_declared_length_reserves_at_most_one_part() {
        let body = Body::new(BodyLimit::WEBHOOK, Some(BodyLimit::WEBHOOK.bytes));
        assert!(body.reserved_bytes() <= BODY_PART_BYTES + 64);
        let undeclared = Body::new(BodyLimit::WEBHOOK, None);
        assert!(undeclared.reserved_bytes() <= BODY_FIRST_PART_BYTES_UNDECLARED + 64);
    }
}
