//! Constrained decoding for a local judge: the exact verdict JSON gavel parses, as a byte-level
//! automaton ([`VerdictGrammar`], [`Cursor`]), and a mask over a tokenizer's byte vocabulary
//! ([`TokenMask`]), so that a sampled verdict always parses.
//!
//! The language, for ids `1`, `2` and checklist items `a`, `b` (no items: no `"items"` key):
//! `{"scores": [{"trajectory_id": "1", "explanation": "TEXT", "items": [{"id": "a", "met": true},
//! {"id": "b", "met": false}], "score": NUM}, {"trajectory_id": "2", ...}]}` on one line.
//! Everything but TEXT, NUM and the true/false choice is forced. TEXT is 0..=max bytes without
//! `"`, `\` or control bytes (any other byte, also invalid UTF-8, is allowed: decode the output
//! with `String::from_utf8_lossy`). NUM is `0`, `1`, `0.` with 1–3 digits or `1.` with 1–3 zeros.
//! Ids and item ids are written JSON-escaped.

/// A piece of the output. Literals are coalesced, so a literal always follows a free segment
/// (Text, Bool, Num) and the literal after Text starts with `"`, after Bool and Num with `}`.
#[derive(Debug)]
enum Seg {
    Lit(Vec<u8>),
    Text,
    Bool,
    Num,
    End,
}

/// `true` and `false` side by side: a Bool cursor at `pos` 1..=3 is inside `true`, 5..=8 inside
/// `false`, 0 is the choice.
const WORDS: &[u8] = b"truefalse";

/// Num states (the cursor's `pos`): nothing, `0`, `0.`, `0.d`, `0.dd`, `0.ddd`, `1`, `1.`,
/// `1.0`, `1.00`, `1.000`.
fn num_step(s: u32, b: u8) -> Option<u32> {
    match (s, b) {
        (0, b'0') => Some(1),
        (0, b'1') => Some(6),
        (1, b'.') | (6, b'.') => Some(s + 1),
        (2..=4, b'0'..=b'9') | (7..=9, b'0') => Some(s + 1),
        _ => None,
    }
}

fn num_can_end(s: u32) -> bool {
    matches!(s, 1 | 3..=6 | 8..=10)
}

/// Bytes that may not appear in TEXT (`"` ends it).
fn text_bad(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// The verdict language for one prompt's trajectory ids and checklist item ids.
pub struct VerdictGrammar {
    segs: Vec<Seg>,
    max_text: u32,
}

/// Where generation stands: a segment index and a position in it (literal offset, TEXT length,
/// NUM state or true/false position).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    seg: u32,
    pos: u32,
}

impl VerdictGrammar {
    /// Ids and items are written in the order given; they should be distinct and non-empty
    /// after trimming, as `parse_verdict` requires.
    pub fn new(
        ids: Vec<String>,
        items: Vec<String>,
        max_explanation_bytes: usize,
    ) -> VerdictGrammar {
        fn esc(s: &str) -> String {
            let j = serde_json::to_string(s).expect("a string serialises");
            j[1..j.len() - 1].to_string()
        }
        let mut segs = Vec::new();
        let mut lit = b"{\"scores\": [".to_vec();
        let mut free = |lit: &mut Vec<u8>, seg: Seg| {
            segs.push(Seg::Lit(std::mem::take(lit)));
            segs.push(seg);
        };
        for (i, id) in ids.iter().enumerate() {
            let open = if i == 0 { "{" } else { "}, {" };
            let head = format!(
                "{open}\"trajectory_id\": \"{}\", \"explanation\": \"",
                esc(id)
            );
            lit.extend_from_slice(head.as_bytes());
            free(&mut lit, Seg::Text);
            lit.push(b'"');
            for (j, item) in items.iter().enumerate() {
                let open = if j == 0 { ", \"items\": [{" } else { "}, {" };
                let s = format!("{open}\"id\": \"{}\", \"met\": ", esc(item));
                lit.extend_from_slice(s.as_bytes());
                free(&mut lit, Seg::Bool);
            }
            if !items.is_empty() {
                lit.extend_from_slice(b"}]");
            }
            lit.extend_from_slice(b", \"score\": ");
            free(&mut lit, Seg::Num);
        }
        lit.extend_from_slice(if ids.is_empty() { b"]}" } else { b"}]}" });
        free(&mut lit, Seg::End);
        let max_text = u32::try_from(max_explanation_bytes).unwrap_or(u32::MAX);
        VerdictGrammar { segs, max_text }
    }

    pub fn start(&self) -> Cursor {
        Cursor { seg: 0, pos: 0 }
    }

    /// Advances over `bytes`; None if any byte is not allowed there.
    pub fn advance(&self, cur: &Cursor, bytes: &[u8]) -> Option<Cursor> {
        let mut c = cur.clone();
        for &b in bytes {
            c = self.step(&c, b)?;
        }
        Some(c)
    }

    pub fn is_complete(&self, cur: &Cursor) -> bool {
        matches!(self.segs[cur.seg as usize], Seg::End)
    }

    /// Whether the next byte starts a score (NUM, nothing of it written yet).
    pub fn at_score(&self, cur: &Cursor) -> bool {
        matches!(self.segs[cur.seg as usize], Seg::Num) && cur.pos == 0
    }

    /// The bytes forced from here, up to the next free choice or the end (empty when the next
    /// byte is free: TEXT below its cap, NUM, the true/false choice).
    pub fn forced(&self, cur: &Cursor) -> Vec<u8> {
        let (seg, pos) = (cur.seg as usize, cur.pos as usize);
        match &self.segs[seg] {
            Seg::Lit(l) => l[pos..].to_vec(),
            Seg::Text if cur.pos == self.max_text => self.lit(seg + 1).to_vec(),
            Seg::Bool if pos > 0 => {
                let end = if pos < 4 { 4 } else { 9 };
                [&WORDS[pos..end], self.lit(seg + 1)].concat()
            }
            Seg::Num if pos == 7 => b"0".to_vec(),
            Seg::Num if pos == 5 || pos == 10 => self.lit(seg + 1).to_vec(),
            _ => Vec::new(),
        }
    }

    fn lit(&self, seg: usize) -> &[u8] {
        match &self.segs[seg] {
            Seg::Lit(l) => l,
            _ => &[],
        }
    }

    /// The cursor at `pos` of segment `seg`, moved on past a finished literal.
    fn at(&self, seg: usize, pos: u32) -> Cursor {
        let done = matches!(&self.segs[seg], Seg::Lit(l) if l.len() == pos as usize);
        let (seg, pos) = if done { (seg + 1, 0) } else { (seg, pos) };
        Cursor {
            seg: seg as u32,
            pos,
        }
    }

    fn step(&self, c: &Cursor, b: u8) -> Option<Cursor> {
        let (seg, pos) = (c.seg as usize, c.pos);
        let to = |pos| Some(Cursor { seg: c.seg, pos });
        match &self.segs[seg] {
            Seg::Lit(l) => (l[pos as usize] == b).then(|| self.at(seg, pos + 1)),
            Seg::Text if b == b'"' => Some(self.at(seg + 1, 1)),
            Seg::Text if text_bad(b) || pos >= self.max_text => None,
            Seg::Text => to(pos + 1),
            Seg::Bool => {
                let next = match (pos, b) {
                    (0, b't') => 1,
                    (0, b'f') => 5,
                    (1.., _) if WORDS[pos as usize] == b => pos + 1,
                    _ => return None,
                };
                match next {
                    4 | 9 => Some(self.at(seg + 1, 0)),
                    _ => to(next),
                }
            }
            Seg::Num => match num_step(pos, b) {
                Some(s) => to(s),
                None if num_can_end(pos) && self.lit(seg + 1).first() == Some(&b) => {
                    Some(self.at(seg + 1, 1))
                }
                None => None,
            },
            Seg::End => None,
        }
    }
}

/// A tokenizer's vocabulary as raw bytes per token id, indexed for [`TokenMask::allowed`]:
/// the usable tokens (non-empty, not EOS) sorted by bytes, so the tokens with a given prefix are
/// one range found by binary search (a table gives the range per first byte); for TEXT, the
/// tokens without `"`, `\` or control bytes sorted by length, and those whose first such byte is
/// `"` sorted by its offset.
pub struct TokenMask {
    bytes: Vec<u8>,
    offs: Vec<usize>,
    eos: Vec<u32>,
    sorted: Vec<u32>,
    first: Vec<(usize, usize)>,
    clean: Vec<u32>,
    quoted: Vec<(u32, usize)>,
}

impl TokenMask {
    /// Tokens with empty bytes are never allowed (give special tokens empty bytes); EOS ids only
    /// when the verdict is complete, whatever their bytes.
    pub fn new(vocab: Vec<Vec<u8>>, eos: Vec<u32>) -> TokenMask {
        let mut offs = Vec::with_capacity(vocab.len() + 1);
        offs.push(0);
        let bytes = vocab.concat();
        for t in &vocab {
            offs.push(offs.last().copied().unwrap_or(0) + t.len());
        }
        let mut m = TokenMask {
            bytes,
            offs,
            eos,
            sorted: Vec::new(),
            first: Vec::new(),
            clean: Vec::new(),
            quoted: Vec::new(),
        };
        let usable = (0..vocab.len() as u32)
            .filter(|id| !m.eos.contains(id) && !vocab[*id as usize].is_empty());
        let mut sorted: Vec<u32> = usable.collect();
        sorted.sort_unstable_by(|&a, &b| m.tok(a).cmp(m.tok(b)));
        m.first = (0..=255u8)
            .map(|b| {
                let lo = sorted.partition_point(|&id| m.tok(id)[0] < b);
                (lo, sorted.partition_point(|&id| m.tok(id)[0] <= b))
            })
            .collect();
        let (mut clean, mut quoted) = (Vec::new(), Vec::new());
        for &id in &sorted {
            match m.tok(id).iter().position(|&b| text_bad(b)) {
                None => clean.push(id),
                Some(q) if m.tok(id)[q] == b'"' => quoted.push((id, q)),
                Some(_) => {}
            }
        }
        clean.sort_by_key(|&id| (m.tok(id).len(), id));
        quoted.sort_by_key(|&(id, q)| (q, id));
        (m.clean, m.quoted) = (clean, quoted);
        m.sorted = sorted;
        m
    }

    fn tok(&self, id: u32) -> &[u8] {
        &self.bytes[self.offs[id as usize]..self.offs[id as usize + 1]]
    }

    /// Token ids allowed at `cur`, in no particular order: the EOS ids when complete, never
    /// before. Where bytes are forced these are the tokens that are a non-empty prefix of them
    /// (so a vocabulary without single-byte tokens still gets the longest fitting pieces) or
    /// that contain them all and continue validly.
    pub fn allowed(&self, g: &VerdictGrammar, cur: &Cursor) -> Vec<u32> {
        if g.is_complete(cur) {
            return self.eos.clone();
        }
        let mut out = Vec::new();
        let forced = g.forced(cur);
        if !forced.is_empty() {
            let after = g.advance(cur, &forced).expect("forced bytes are allowed");
            self.collect(g, &forced, &after, &mut out);
        } else if matches!(g.segs[cur.seg as usize], Seg::Text) {
            let room = (g.max_text - cur.pos) as usize;
            let n = self.clean.partition_point(|&id| self.tok(id).len() <= room);
            out.extend_from_slice(&self.clean[..n]);
            let close = Cursor {
                seg: cur.seg + 1,
                pos: 0,
            };
            for &(id, q) in self.quoted.iter().take_while(|(_, q)| *q <= room) {
                if g.advance(&close, &self.tok(id)[q..]).is_some() {
                    out.push(id);
                }
            }
        } else {
            // NUM or the true/false choice: a few possible first bytes, each followed by forced
            // bytes (`}` and the next literal, `rue`, ...) or by another free choice.
            for b in 0..=255u8 {
                if let Some(next) = g.step(cur, b) {
                    let rest = g.forced(&next);
                    let after = g.advance(&next, &rest).expect("forced bytes are allowed");
                    self.collect(g, &[&[b], &rest[..]].concat(), &after, &mut out);
                }
            }
        }
        out
    }

    /// Pushes the tokens that are a non-empty prefix of `p`, and those that start with `p` and
    /// whose remaining bytes are allowed from `after` (the cursor past `p`).
    fn collect(&self, g: &VerdictGrammar, p: &[u8], after: &Cursor, out: &mut Vec<u32>) {
        let (mut lo, mut hi) = self.first[p[0] as usize];
        for k in 1..=p.len() {
            if k > 1 {
                // All tokens in lo..hi start with p[..k - 1] and are at least k bytes long.
                let s = &self.sorted[lo..hi];
                let a = s.partition_point(|&id| self.tok(id)[k - 1] < p[k - 1]);
                let z = s.partition_point(|&id| self.tok(id)[k - 1] <= p[k - 1]);
                (lo, hi) = (lo + a, lo + z);
            }
            while lo < hi && self.tok(self.sorted[lo]).len() == k {
                out.push(self.sorted[lo]);
                lo += 1;
            }
            if lo == hi {
                return;
            }
        }
        for &id in &self.sorted[lo..hi] {
            if g.advance(after, &self.tok(id)[p.len()..]).is_some() {
                out.push(id);
            }
        }
    }

    /// Applies the mask to logits in place: disallowed entries (also ids past the vocabulary)
    /// become `f32::NEG_INFINITY`.
    pub fn apply(&self, g: &VerdictGrammar, cur: &Cursor, logits: &mut [f32]) {
        let keep: Vec<(usize, f32)> = self
            .allowed(g, cur)
            .into_iter()
            .map(|id| id as usize)
            .filter(|&i| i < logits.len())
            .map(|i| (i, logits[i]))
            .collect();
        logits.fill(f32::NEG_INFINITY);
        for (i, v) in keep {
            logits[i] = v;
        }
    }
}

#[cfg(test)]
#[path = "constrain_tests.rs"]
mod tests;
