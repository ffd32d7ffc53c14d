//! Tests of the verdict parser (kept apart so that `parse.rs` reads as the parser alone).
use super::*;

fn ids(n: usize) -> Vec<String> {
    (1..=n).map(|i| i.to_string()).collect()
}
fn parse(text: &str, n: usize, allow: bool) -> Result<Vec<ParsedScore>, ParseProblem> {
    let (expected_ids, allow_missing_score) = (ids(n), allow);
    parse_verdict(
        text,
        &ParseOptions {
            expected_ids: &expected_ids,
            allow_missing_score,
            expected_items: &[],
        },
    )
}
fn scores(text: &str, n: usize) -> Vec<f64> {
    let out = parse(text, n, false).unwrap();
    out.iter().map(|p| p.score.unwrap()).collect()
}
/// `{"scores": [...]}` with ids 1, 2, ... and the given raw JSON scores.
fn verdict(scores: &[&str]) -> String {
    let entry = |(i, s)| format!(r#"{{"trajectory_id": "{}", "score": {s}}}"#, i + 1_usize);
    let entries: Vec<String> = scores.iter().enumerate().map(entry).collect();
    format!(r#"{{"scores": [{}]}}"#, entries.join(", "))
}
/// One scored trajectory "1" with the given raw JSON checklist items.
fn items(items: &str) -> String {
    format!(r#"{{"scores": [{{"id": 1, "score": 1, "items": {items}}}]}}"#)
}
fn ps(id: &str, score: Option<f64>, explanation: &str, items: Vec<ItemVerdict>) -> ParsedScore {
    let (trajectory_id, explanation) = (id.to_string(), explanation.to_string());
    ParsedScore {
        trajectory_id,
        score,
        explanation,
        items,
        clamped: false,
    }
}
fn it(id: &str, met: bool) -> ItemVerdict {
    ItemVerdict { id: id.into(), met }
}

#[test]
fn finds_the_verdict() {
    let plain = r#"{"scores": [{"trajectory_id": "1", "explanation": "ok", "score": 0.8},
        {"trajectory_id": "2", "score": 0.3}]}"#;
    let out = parse(plain, 2, false).unwrap();
    assert_eq!(out[0], ps("1", Some(0.8), "ok", vec![]));
    assert_eq!(out[1], ps("2", Some(0.3), "", vec![]));
    let fenced = "So:\n```json\n{\"scores\": [{\"id\": 1, \"score\": 0.25}]}\n```\nBye {x}.";
    assert_eq!(scores(fenced, 1), vec![0.25]);
    let braces = r#"{a}. {"scores": [{"id": 1, "explanation": "{x} and } \"}\"", "score": 0.5}]}"#;
    let want = ps("1", Some(0.5), r#"{x} and } "}""#, vec![]);
    assert_eq!(parse(braces, 1, false).unwrap(), vec![want]);
    let unbalanced = r#"a { b {"scores": [{"id": 1, "score": 0.5}]} c"#;
    assert_eq!(scores(unbalanced, 1), vec![0.5]);
    let bare = r#"[{"trajectory_id": "2", "score": 0.2}, {"trajectory_id": 1, "score": 0.1}]"#;
    assert_eq!(scores(bare, 2), vec![0.1, 0.2]);
    let bare_in_text = "So:\n[{\"id\": 1, \"score\": 9}, {\"id\": 2, \"score\": 4}]\nok";
    assert_eq!(scores(bare_in_text, 2), vec![0.9, 0.4]);
}

#[test]
fn the_last_verdict_in_a_reply_wins() {
    // A draft, then the verdict the judge means: the first one found used to win.
    let drafted = r#"Draft: {"scores": [{"id": 1, "score": 0.2}]}
        On reflection: {"scores": [{"id": 1, "score": 0.9}]}"#;
    assert_eq!(scores(drafted, 1), vec![0.9]);
    let fenced = "```json\n{\"scores\": [{\"id\": 1, \"score\": 0.1}]}\n```\nWait.\n\
                  ```json\n{\"scores\": [{\"id\": 1, \"score\": 0.7}]}\n```";
    assert_eq!(scores(fenced, 1), vec![0.7]);
    // Object first, then a bare array: still the last.
    let mixed = r#"{"scores": [{"id": 1, "score": 0.3}]} then [{"id": 1, "score": 0.6}]"#;
    assert_eq!(scores(mixed, 1), vec![0.6]);
    // JSON that is not a verdict after the verdict is not taken for one.
    let trailing = r#"{"scores": [{"id": 1, "score": 0.4}]} {"note": [1, 2]}"#;
    assert_eq!(scores(trailing, 1), vec![0.4]);
}

#[test]
fn clamped_scores_are_flagged() {
    let out = parse(&verdict(&["1.4", "0.5", "-0.2"]), 3, false).unwrap();
    let got: Vec<(f64, bool)> = out.iter().map(|p| (p.score.unwrap(), p.clamped)).collect();
    assert_eq!(got, vec![(1.0, true), (0.5, false), (0.0, true)]);
    let out = parse(&verdict(&["7", "10"]), 2, false).unwrap();
    assert!(
        out.iter().all(|p| !p.clamped),
        "0-10 scale: nothing clamped"
    );
    let out = parse(&verdict(&[r#""120%""#]), 1, false).unwrap();
    assert!(out[0].clamped);
}

#[test]
fn a_checklist_verdict_needs_its_items() {
    let expected = vec!["a".to_string(), "b".to_string()];
    let ids = ids(2);
    let opts = ParseOptions {
        expected_ids: &ids,
        allow_missing_score: true,
        expected_items: &expected,
    };
    // No items at all, or null: every item would have counted as unmet (a reward of 0).
    for text in [
        r#"{"scores":[{"trajectory_id":"1"},{"trajectory_id":"2"}]}"#,
        r#"{"scores":[{"trajectory_id":"1","items":null},{"trajectory_id":"2","items":null}]}"#,
    ] {
        let e = parse_verdict(text, &opts).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"checklist items for trajectory 1: no "items" (expected a verdict for each of the items a, b)"#
        );
    }
    // Without a checklist, items stay optional.
    assert_eq!(
        parse(r#"{"scores":[{"id":1,"score":0.5}]}"#, 1, false).unwrap()[0].items,
        vec![]
    );
}

#[test]
fn maps_by_id() {
    let text = r#"[{"id": 3, "score": 0.3}, {"trajectory_id": 1, "score": 0.1},
        {"trajectory_id": " 2 ", "score": 0.2}]"#;
    let out = parse(text, 3, false).unwrap();
    assert_eq!(out[0], ps("1", Some(0.1), "", vec![]));
    assert_eq!(out[1], ps("2", Some(0.2), "", vec![]));
    assert_eq!(out[2], ps("3", Some(0.3), "", vec![]));
}

#[test]
fn normalises_scores() {
    let cases: &[(&[&str], &[f64])] = &[
        (&[r#""0.8""#, r#""8/10""#, r#""40%""#], &[0.8, 0.8, 0.4]),
        (&[r#""7/10""#, r#""12/10""#, "0.5"], &[0.7, 1.0, 0.5]), // fractions: no inference
        (&["8", "3", "10"], &[0.8, 0.3, 1.0]),
        (&["85", "40"], &[0.85, 0.4]),
        (&["0.9", "0.2", "3"], &[0.9, 0.2, 1.0]),
        (&["7"], &[0.7]),
        (&["55"], &[0.55]),
        (&["-0.5", "0.6"], &[0.0, 0.6]),
        (&["-2", "4", r#"" 6 ""#], &[0.0, 0.4, 0.6]),
        (&["150", "20", "0.5"], &[1.0, 1.0, 0.5]),
        (&["1", "0"], &[1.0, 0.0]),
    ];
    for (input, want) in cases {
        assert_eq!(scores(&verdict(input), input.len()), *want, "{input:?}");
    }
}

#[test]
fn reports_problems() {
    let all = r#"[{"id": 1, "score": 0.1}, {"id": 1, "score": 0.1}, {"id": 9, "score": 0.2}]"#;
    let (missing, unknown, duplicate) = (ids(3)[1..].to_vec(), ids(9)[8..].to_vec(), ids(1));
    let want = ParseProblem::IdMismatch {
        missing,
        unknown,
        duplicate,
        expected: ids(3),
    };
    assert_eq!(parse(all, 3, false).unwrap_err(), want);
    let dup = r#"[{"id": "2", "score": 0.1}, {"id": 1, "score": 0.2}, {"id": 2, "score": 0.3}]"#;
    let unknown = r#"[{"id": 1, "score": 0.1}, {"id": 7, "score": 0.2}, {"id": 2, "score": 0.3},
        {"id": 3, "score": 1}]"#;
    let cases: &[(&str, usize, &str)] = &[
        ("Trajectory 1 is best.", 1, r#"no JSON object with a "scores" array found"#),
        (r#"{"score": 0.5} and [1, 2]"#, 1, r#"no JSON object with a "scores" array found"#),
        ("", 1, r#"no JSON object with a "scores" array found"#),
        (&verdict(&["0.1", "0.2"]), 4, "missing scores for trajectory ids: 3, 4"),
        (dup, 2, "duplicate trajectory id: 2"),
        (unknown, 3, "unknown trajectory ids: 7 (expected ids are 1, 2, 3)"),
        (all, 3, "missing scores for trajectory ids: 2, 3; unknown trajectory ids: 9 (expected ids are 1, 2, 3); duplicate trajectory id: 1"),
        (r#"[{"score": 0.1}]"#, 1, r#"score entry 1 has no "trajectory_id""#),
        (r#"[{"id": 1.5, "score": 0.1}]"#, 1, "score entry 1 has an invalid trajectory_id: 1.5 (expected a non-empty string or an integer)"),
        (r#"{"scores": [3]}"#, 1, "score entry 1 is not a JSON object: 3"),
        (&verdict(&["0.1", r#""great""#]), 2, r#"score for trajectory 2 is not a number: "great""#),
        (&verdict(&[r#""inf""#]), 1, r#"score for trajectory 1 is not a number: "inf""#),
        (&verdict(&[r#""3/0""#]), 1, r#"score for trajectory 1 is not a number: "3/0""#),
        (&verdict(&["true"]), 1, "score for trajectory 1 is not a number: true"),
        (r#"[{"id": 1, "score": null}]"#, 1, "missing score for trajectory 1"),
        (&items(r#"[{"id":"a","met":true},{"id":"a","met":false}]"#), 1, "checklist items for trajectory 1: duplicate item id: a"),
        (&items(r#"[{"id":"a","met":"maybe"}]"#), 1, r#"checklist items for trajectory 1: item a has an invalid "met" value: "maybe" (expected true or false)"#),
        (&items(r#"[{"id":"a"}]"#), 1, r#"checklist items for trajectory 1: item a has no "met" value (expected true or false)"#),
        (&items(r#"[{"met":true}]"#), 1, r#"checklist items for trajectory 1: item 1 has no string or integer "id": {"met":true}"#),
        (&items(r#""a""#), 1, r#"checklist items for trajectory 1: "items" is not an array: "a""#),
        // The prompt's example, copied (as a 0.5B copied the one-entry example).
        (r#"{"scores": [{"trajectory_id": "1", "explanation": "...", "score": 0.0}, {"trajectory_id": "2", "explanation": "...", "score": 0.0}]}"#,
         2, "the reply copies the example's placeholders: write each trajectory's own explanation and score"),
    ];
    for (text, n, msg) in cases {
        let got = parse(text, *n, false).unwrap_err().to_string();
        assert_eq!(got, *msg, "{text}");
    }
}

#[test]
fn checklist_items() {
    let text = r#"{"scores": [{"id": 1, "explanation": [1],
        "items": [{"id": "a", "met": true}, {"id": 2, "met": "No"}]},
        {"id": 2, "score": 0.5, "items": [{"id": " a ", "met": "yes"}, {"id": "b", "met": "false"}]}]}"#;
    let want = vec![
        ps("1", None, "[1]", vec![it("a", true), it("2", false)]),
        ps("2", Some(0.5), "", vec![it("a", true), it("b", false)]),
    ];
    assert_eq!(parse(text, 2, true).unwrap(), want);
    let err = parse(text, 2, false).unwrap_err();
    assert_eq!(
        err,
        ParseProblem::MissingScore {
            trajectory_id: "1".into()
        }
    );
}

#[test]
fn checklist_items_must_match_the_rubric() {
    let ids = vec!["1".to_string()];
    let items = vec!["a".to_string(), "b".to_string()];
    let opts = ParseOptions {
        expected_ids: &ids,
        allow_missing_score: true,
        expected_items: &items,
    };
    let ok = parse_verdict(r#"{"scores":[{"trajectory_id":"1","items":[{"id":"b","met":false},{"id":"a","met":true}]}]}"#, &opts).unwrap();
    assert_eq!(ok[0].items.len(), 2);
    let e = parse_verdict(r#"{"scores":[{"trajectory_id":"1","items":[{"id":"a","met":true},{"id":"z","met":true}]}]}"#, &opts).unwrap_err();
    assert_eq!(
        e.to_string(),
        "checklist items for trajectory 1: missing items: b; unknown items: z (expected items are a, b)"
    );
}
