//! Scrubbing secrets from command output: the one redaction used by the
//! sandbox agent (before it truncates output) and the Worker (before it
//! stores a log or a check summary).
//!
//! A secret is matched in the forms a command plausibly prints it in: as is,
//! each line of a multi-line value, base64 (standard and URL-safe, at any
//! alignment inside a longer encoded string), percent-encoded and
//! JSON-escaped; base64 also when the encoder wrapped its lines. Every match
//! is masked, overlapping ones included, so two secrets that share bytes
//! never leave a part of either visible. Output streams through
//! [`StreamRedactor`], which holds back only as many bytes as a match can
//! span, so a secret split across two chunks is still caught.

mod forms;

use memchr::memmem::Finder;

pub use forms::{DERIVED_NEEDLE_LEN_MIN, SECRET_LEN_MIN};

/// What a masked run of output becomes.
pub const MASK: &[u8] = b"***";

/// How many output bytes one needle may span: a line-wrapped encoding puts
/// up to a `\r\n` between any two of its characters.
const SPAN_PER_NEEDLE_BYTE: usize = 3;

/// The needles of a set of secrets, ready to scan output with.
#[derive(Clone, Default)]
pub struct Redactor {
    needles: Vec<Finder<'static>>,
    /// The most output bytes a single match can cover.
    span_max: usize,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redactor({} needles)", self.needles.len())
    }
}

impl Redactor {
    /// A redactor for `secrets`; values shorter than [`SECRET_LEN_MIN`]
    /// would mask ordinary words and are skipped.
    pub fn new<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Redactor {
        let needles = forms::needles(secrets);
        let longest = needles.iter().map(Vec::len).max().unwrap_or(0);
        Redactor {
            needles: needles
                .iter()
                .map(|n| Finder::new(n).into_owned())
                .collect(),
            span_max: longest * SPAN_PER_NEEDLE_BYTE,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.needles.is_empty()
    }

    /// Scrubs a whole text.
    pub fn redact(&self, text: &str) -> String {
        let mut stream = StreamRedactor::new(self.clone());
        let mut out = stream.push(text.as_bytes());
        out.extend(stream.finish());
        // Masks replace whole matches of valid UTF-8 needles, but a match
        // may start inside a multi-byte character of the surrounding text.
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The masked byte ranges of `text`, sorted and merged.
    fn masks(&self, text: &[u8]) -> Vec<(usize, usize)> {
        let mut ranges = Vec::new();
        for finder in &self.needles {
            overlapping_matches(finder, text, |start, end| ranges.push((start, end)));
        }
        if text.iter().any(|b| *b == b'\n' || *b == b'\r') {
            wrapped_matches(&self.needles, text, &mut ranges);
        }
        merge(ranges)
    }
}

/// Every match of `finder` in `text`, including matches that overlap.
fn overlapping_matches(finder: &Finder<'_>, text: &[u8], mut found: impl FnMut(usize, usize)) {
    let len = finder.needle().len();
    let mut from = 0;
    while let Some(at) = text.get(from..).and_then(|rest| finder.find(rest)) {
        found(from + at, from + at + len);
        from += at + 1;
    }
}

/// Matches in `text` with its line breaks removed, mapped back to the
/// original bytes: base64 wrapped at 76 columns, a token folded by a tool.
fn wrapped_matches(needles: &[Finder<'static>], text: &[u8], ranges: &mut Vec<(usize, usize)>) {
    let mut view = Vec::with_capacity(text.len());
    let mut origin = Vec::with_capacity(text.len());
    for (i, b) in text.iter().enumerate() {
        if *b != b'\n' && *b != b'\r' {
            view.push(*b);
            origin.push(i);
        }
    }
    for finder in needles {
        overlapping_matches(finder, &view, |start, end| {
            ranges.push((origin[start], origin[end - 1] + 1));
        });
    }
}

/// Sorts ranges and merges the ones that overlap or touch.
fn merge(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// Scrubs output that arrives in chunks. Bytes that a later chunk could
/// still turn into part of a match are held back (at most one match span);
/// everything else is emitted masked.
pub struct StreamRedactor {
    redactor: Redactor,
    /// The last emitted input bytes, so a match that began in them is found
    /// again when its end arrives.
    context: Vec<u8>,
    /// Input not emitted yet.
    held: Vec<u8>,
    /// The last emitted byte was masked: a mask continuing from it adds no
    /// second marker.
    ended_masked: bool,
}

impl StreamRedactor {
    pub fn new(redactor: Redactor) -> StreamRedactor {
        StreamRedactor {
            redactor,
            context: Vec::new(),
            held: Vec::new(),
            ended_masked: false,
        }
    }

    /// Takes a chunk; returns the output that is final.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.redactor.is_empty() {
            return chunk.to_vec();
        }
        self.held.extend_from_slice(chunk);
        let keep = self.redactor.span_max.saturating_sub(1);
        self.emit(self.held.len().saturating_sub(keep))
    }

    /// The rest of the output, once no more input comes.
    pub fn finish(mut self) -> Vec<u8> {
        let all = self.held.len();
        self.emit(all)
    }

    /// Emits the first `count` held bytes, masked.
    fn emit(&mut self, count: usize) -> Vec<u8> {
        if count == 0 {
            return Vec::new();
        }
        let mut text = std::mem::take(&mut self.context);
        let offset = text.len();
        text.extend_from_slice(&self.held);
        let masks = self.redactor.masks(&text);
        let end = offset + count;
        let out = self.render(&text, &masks, offset, end);
        let context_start = end.saturating_sub(self.redactor.span_max);
        self.context = text[context_start..end].to_vec();
        self.held = text[end..].to_vec();
        out
    }

    /// `text[from..to]` with every masked run replaced by [`MASK`].
    fn render(&mut self, text: &[u8], masks: &[(usize, usize)], from: usize, to: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(to - from);
        let mut at = from;
        for &(start, end) in masks.iter().filter(|(s, e)| *e > from && *s < to) {
            if start > at {
                out.extend_from_slice(&text[at..start]);
                self.ended_masked = false;
            }
            let continues = start < from && self.ended_masked;
            if !continues {
                out.extend_from_slice(MASK);
            }
            at = end.min(to);
            self.ended_masked = true;
        }
        if to > at {
            out.extend_from_slice(&text[at..to]);
            self.ended_masked = false;
        }
        out
    }
}

#[cfg(test)]
mod tests;
