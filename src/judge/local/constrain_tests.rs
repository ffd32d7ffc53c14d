//! Tests of the verdict grammar and token masks (`constrain.rs`): kept apart so that file holds
//! the automaton alone.

use super::*;
use crate::domain::rng::Rng;
use crate::domain::verdict::{parse_verdict, ParseOptions};

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
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
    let mut rng = Rng::new(seed);
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
    let mut rng = Rng::new(0x1234_5678);
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
