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
mod tests {
    use super::*;
    use crate::verdict::{parse_verdict, ParseOptions};

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Multi-byte tokens, `|`-separated.
    const MULTI: &str = "{\"|scores|\": [|{\"trajectory_id\": \"|\", \"|explanation|\": \"|0.|5}|}, {|]}|}]}| the| is|\"}|\",|\", \"score\": 0.|true|false|true}|false}, {\"|0.5}|1.000}]}|1.0|00}|25|12|-0|1.5|2|.\"|ok\", \"|a\nb|\\n|\"id\": \"|\", \"met\": |items|{\"id\": \"a|\"\"|score|}], \"score\": 1}|é|ÿÃ";

    /// All single bytes, the pieces above, a partial UTF-8 token, an empty token and EOS last.
    fn small_vocab() -> (Vec<Vec<u8>>, u32) {
        let mut v: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        v.extend(MULTI.split('|').map(|s| s.as_bytes().to_vec()));
        v.extend([vec![0xC3], vec![0xA9, 0xC3], vec![], b"<|im_end|>".to_vec()]);
        let eos = v.len() as u32 - 1;
        (v, eos)
    }

    /// Every token `advance` accepts (EOS only when complete), sorted.
    fn brute(g: &VerdictGrammar, vocab: &[Vec<u8>], eos: u32, cur: &Cursor) -> Vec<u32> {
        if g.is_complete(cur) {
            return vec![eos];
        }
        let ok = |i: &usize| *i as u32 != eos && !vocab[*i].is_empty();
        let ok = |i: &usize| ok(i) && g.advance(cur, &vocab[*i]).is_some();
        (0..vocab.len()).filter(ok).map(|i| i as u32).collect()
    }

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    /// A random walk over allowed tokens; returns the output bytes.
    fn walk(g: &VerdictGrammar, m: &TokenMask, vocab: &[Vec<u8>], eos: u32, seed: u64) -> Vec<u8> {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (mut cur, mut out) = (g.start(), Vec::new());
        for _ in 0..10_000 {
            let allowed = m.allowed(g, &cur);
            assert!(
                !allowed.is_empty(),
                "stuck after {:?}",
                String::from_utf8_lossy(&out)
            );
            if seed < 40 {
                assert_eq!(sorted(allowed.clone()), brute(g, vocab, eos, &cur));
            }
            let id = allowed[rng.below(allowed.len())];
            if id == eos {
                assert!(g.is_complete(&cur));
                return out;
            }
            assert!(!g.is_complete(&cur));
            out.extend_from_slice(&vocab[id as usize]);
            cur = g
                .advance(&cur, &vocab[id as usize])
                .expect("allowed token advances");
        }
        panic!("walk did not end");
    }

    #[test]
    fn random_walks_always_parse() {
        let (vocab, eos) = small_vocab();
        let m = TokenMask::new(vocab.clone(), vec![eos]);
        let ids = strs(&["1", "2", "3"]);
        for items in [vec![], strs(&["a", "uses_tools", "q\"x\\y"])] {
            let g = VerdictGrammar::new(ids.clone(), items.clone(), 40);
            for seed in 0..500 {
                let out = walk(&g, &m, &vocab, eos, seed);
                let text = String::from_utf8_lossy(&out);
                let opts = ParseOptions {
                    expected_ids: &ids,
                    allow_missing_score: false,
                    expected_items: &items,
                };
                let parsed = parse_verdict(&text, &opts).unwrap_or_else(|e| panic!("{e}: {text}"));
                assert_eq!(parsed.len(), ids.len());
                for (p, id) in parsed.iter().zip(&ids) {
                    assert_eq!(&p.trajectory_id, id);
                    assert!((0.0..=1.0).contains(&p.score.unwrap()), "{text}");
                    let got: Vec<&String> = p.items.iter().map(|i| &i.id).collect();
                    assert_eq!(got, items.iter().collect::<Vec<_>>(), "{text}");
                }
            }
        }
    }

    #[test]
    fn forced_bytes_and_escaped_ids() {
        let g = VerdictGrammar::new(strs(&["a\"b"]), vec![], 5);
        let head = b"{\"scores\": [{\"trajectory_id\": \"a\\\"b\", \"explanation\": \"";
        assert_eq!(g.forced(&g.start()), head.to_vec());
        let c = g.advance(&g.start(), head).unwrap();
        assert!(g.forced(&c).is_empty());
        let c = g.advance(&c, b"ok\", \"score\": 1.").unwrap();
        assert_eq!(g.forced(&c), b"0");
        let c = g.advance(&c, b"00").unwrap();
        assert!(g.forced(&c).is_empty());
        let c = g.advance(&c, b"0").unwrap();
        assert_eq!(g.forced(&c), b"}]}");
        let c = g.advance(&c, b"}]}").unwrap();
        assert!(g.is_complete(&c) && g.forced(&c).is_empty());
        let at = g.advance(&g.start(), head).unwrap();
        assert!(!g.at_score(&at));
        let at = g.advance(&at, b"ok\", \"score\": ").unwrap();
        assert!(g.at_score(&at) && !g.at_score(&g.advance(&at, b"0").unwrap()));
        let empty = VerdictGrammar::new(vec![], vec![], 5);
        assert!(empty.is_complete(&empty.advance(&empty.start(), b"{\"scores\": []}").unwrap()));
    }

    #[test]
    fn advance_rejects() {
        let g = VerdictGrammar::new(strs(&["1", "2"]), vec![], 10);
        let s = g.start();
        let text: &[u8] = b"{\"scores\": [{\"trajectory_id\": \"1\", \"explanation\": \"";
        let num = [text, b"ab\", \"score\": "].concat();
        let ok = |b: &[u8]| g.advance(&s, b).is_some();
        assert!(ok(text) && ok(&num));
        for bad in [
            &b"{\"score\": "[..],
            b"{\"scores\": [{\"trajectory_id\": \"3\"",
        ] {
            assert!(!ok(bad), "{}", String::from_utf8_lossy(bad));
        }
        for tail in [&b"ab\"cd"[..], b"a\\n", b"a\nb", b"0123456789x"] {
            assert!(
                !ok(&[text, tail].concat()),
                "{}",
                String::from_utf8_lossy(tail)
            );
        }
        assert!(ok(&[text, b"0123456789\""].concat()));
        for n in [
            "1.5", "0.1234", "2", "-0", "1.0000", "00", "0.}", "1.}", ".5", "01",
        ] {
            assert!(!ok(&[&num[..], n.as_bytes()].concat()), "{n}");
        }
        for n in [
            "0}",
            "1}",
            "0.5}",
            "0.25}",
            "0.125}",
            "1.0}",
            "1.00}",
            "1.000}, {",
        ] {
            assert!(ok(&[&num[..], n.as_bytes()].concat()), "{n}");
        }
        let gi = VerdictGrammar::new(strs(&["1"]), strs(&["a", "b"]), 10);
        let items = [text, b"\", \"items\": [{\"id\": \""].concat();
        let ok = |b: &[u8]| gi.advance(&gi.start(), b).is_some();
        assert!(ok(&[
            &items[..],
            b"a\", \"met\": false}, {\"id\": \"b\", \"met\": t"
        ]
        .concat()));
        assert!(!ok(&[&items[..], b"b"].concat()));
        assert!(!ok(&[&items[..], b"a\", \"met\": yes"].concat()));
        assert!(!ok(
            &[&items[..], b"a\", \"met\": true}], \"score\""].concat()
        ));
        // EOS: never before the end, alone after it.
        let (vocab, eos) = small_vocab();
        let m = TokenMask::new(vocab, vec![eos]);
        let full = [
            &num[..],
            b"1}, {\"trajectory_id\": \"2\", \"explanation\": \"\", \"score\": 0}]",
        ]
        .concat();
        let c = g.advance(&s, &full).unwrap();
        assert!(!g.is_complete(&c) && !m.allowed(&g, &c).contains(&eos));
        let c = g.advance(&c, b"}").unwrap();
        assert!(g.is_complete(&c) && g.advance(&c, b" ").is_none());
        assert_eq!(m.allowed(&g, &c), vec![eos]);
    }

    #[test]
    fn text_cap() {
        let (vocab, eos) = small_vocab();
        let m = TokenMask::new(vocab.clone(), vec![eos]);
        let g = VerdictGrammar::new(strs(&["1"]), vec![], 4);
        let head = b"{\"scores\": [{\"trajectory_id\": \"1\", \"explanation\": \"";
        let mut c = g.advance(&g.start(), head).unwrap();
        for room in (0..=4).rev() {
            let allowed = sorted(m.allowed(&g, &c));
            assert_eq!(allowed, brute(&g, &vocab, eos, &c));
            let longest = allowed
                .iter()
                .map(|&i| vocab[i as usize].len())
                .max()
                .unwrap();
            if room == 0 {
                assert_eq!(g.forced(&c), b"\", \"score\": ");
                assert!(allowed.iter().all(|&i| vocab[i as usize][0] == b'"'));
                assert!(allowed.contains(&(b'"' as u32)));
                let ids = ["\"}", "\",", "\", \"score\": 0.", "\"\""].map(|t| {
                    let i = vocab.iter().position(|v| v == t.as_bytes()).unwrap() as u32;
                    allowed.contains(&i)
                });
                assert_eq!(ids, [false, true, true, false]);
            } else {
                assert!(allowed.contains(&(b'x' as u32)) && longest > room);
                c = g.advance(&c, b"x").unwrap();
            }
        }
    }

    #[test]
    fn apply_masks_exactly() {
        let (vocab, eos) = small_vocab();
        let m = TokenMask::new(vocab.clone(), vec![eos]);
        let g = VerdictGrammar::new(strs(&["1"]), strs(&["a"]), 8);
        let prefixes: [&[u8]; 4] = [b"", b"{\"scores\": [{\"traj", b"{\"scores\": [{\"trajectory_id\": \"1\", \"explanation\": \"hi", b"{\"scores\": [{\"trajectory_id\": \"1\", \"explanation\": \"\", \"items\": [{\"id\": \"a\", \"met\": "];
        for p in prefixes {
            let c = g.advance(&g.start(), p).unwrap();
            let allowed = m.allowed(&g, &c);
            let mut logits: Vec<f32> = (0..vocab.len() + 5).map(|i| i as f32).collect();
            m.apply(&g, &c, &mut logits);
            for (i, &l) in logits.iter().enumerate() {
                let want = if allowed.contains(&(i as u32)) {
                    i as f32
                } else {
                    f32::NEG_INFINITY
                };
                assert_eq!(l, want, "token {i}");
            }
        }
    }

    #[test]
    fn large_vocab_matches_brute_force() {
        let mut rng = Rng(0x1234_5678);
        let alphabet = b"abcdefghijklmnopqrstuvwxyz eost.,:\"{}[]0123456789\\\n_-\xc3\xa9";
        let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        vocab.extend(MULTI.split('|').map(|s| s.as_bytes().to_vec()));
        while vocab.len() < 150_000 {
            let len = 2 + rng.below(7);
            vocab.push(
                (0..len)
                    .map(|_| alphabet[rng.below(alphabet.len())])
                    .collect(),
            );
        }
        let eos = 150_000;
        vocab.push(b"<|endoftext|>".to_vec());
        let m = TokenMask::new(vocab.clone(), vec![eos]);
        let g = VerdictGrammar::new(strs(&["1", "2"]), strs(&["a"]), 30);
        let text = "{\"scores\": [{\"trajectory_id\": \"1\", \"explanation\": \"";
        let item = format!("{text}ok\", \"items\": [{{\"id\": \"a\", \"met\": ");
        let num = format!("{item}true}}], \"score\": ");
        let points = [
            String::new(),
            "{\"scores\": [{\"trajectory_id\": \"1\", \"explanation".into(),
            text.into(),
            format!("{text}The run is ok"),
            format!("{text}{}", "x".repeat(28)),
            format!("{text}{}", "x".repeat(30)),
            item.clone(),
            format!("{item}f"),
            num.clone(),
            format!("{num}0"),
            format!("{num}1."),
            format!("{num}0.12"),
            format!("{num}0.125"),
        ];
        for p in &points {
            let c = g.advance(&g.start(), p.as_bytes()).unwrap();
            let got = sorted(m.allowed(&g, &c));
            assert!(!got.is_empty(), "{p}");
            assert_eq!(got, brute(&g, &vocab, eos, &c), "{p}");
        }
    }
}
