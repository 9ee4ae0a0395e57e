use super::*;
use crate::lang::toml_nodes::{parse_document, parse_whole};

/// A workflow of `n` steps, each a header, a dependency list written over
/// several lines and an inputs table, about 250 bytes a step.
fn workflow(n: usize) -> String {
    let mut text =
        String::from("[workflow]\nname = \"pieces\"\n\n[vars.region]\ndefault = \"us-west-2\"\n\n");
    for i in 0..n {
        text.push_str(&format!("[steps.s{i}]\nprovider = \"null\"\n"));
        if i > 0 {
            text.push_str(&format!("depends_on = [\n  \"s{}\",\n]\n", i - 1));
        }
        text.push_str(&format!(
            "[steps.s{i}.inputs]\nindex = {i}\nfrom = \"${{vars.region}}-{i}\"  # a comment [x]\n\n"
        ));
    }
    text
}

fn source(text: &str) -> Source {
    Source::new("wf.toml".to_string(), text.to_string())
}

/// Sizes for the tests: a file of 8 kB and more is cut every 2 kB.
fn in_pieces(src: &Source) -> Option<Vec<Entry>> {
    parse_cut(
        src,
        crate::lang::toml_nodes::convert_table,
        8 << 10,
        2 << 10,
    )
}

#[test]
fn a_large_workflow_parses_in_pieces_to_the_same_entries_and_spans() {
    let text = workflow(300);
    let cuts = cut_points(&text, 2 << 10).expect("cut");
    assert!(cuts.len() >= 10, "{cuts:?}");
    for &cut in &cuts {
        assert!(
            text[cut..].starts_with("[steps.s"),
            "{}",
            &text[cut..cut + 20]
        );
    }
    let src = source(&text);
    let pieces = in_pieces(&src).expect("parsed in pieces");
    let (whole, diags) = parse_whole(&src);
    assert!(diags.is_empty());
    assert_eq!(pieces, whole);
}

#[test]
fn the_front_door_cuts_a_file_past_half_a_megabyte_only() {
    let small = source(&workflow(300));
    assert!(small.text.len() < SMALLEST_TO_CUT);
    assert!(parse_in_pieces(&small, crate::lang::toml_nodes::convert_table).is_none());
    let (entries, diags) = parse_document(&small);
    assert!(diags.is_empty() && entries.len() == 3, "{entries:?}");
}

#[test]
fn lines_inside_strings_arrays_and_comments_are_never_cut_points() {
    let inside = [
        // A multi-line basic string whose lines look like step headers.
        "run = \"\"\"\n[steps.fake]\nx = 1\n\"\"\"\n",
        // The same in a literal one, with quotes at its end.
        "run = '''\n[steps.fake]\n'x'''\n",
        // An escaped quote does not end a basic string.
        "text = \"a \\\" [steps.fake]\"\n",
        // An array of arrays over several lines.
        "grid = [\n[steps.fake]\n]\n",
        // An escaped backslash before the closing quotes.
        "run = \"\"\"\\\\\"\"\"\n",
    ];
    for case in inside {
        let text = format!(
            "{}{case}[steps.real]\nprovider = \"null\"\n",
            "# pad\n".repeat(20)
        );
        let cuts = cut_points(&text, 10).unwrap_or_default();
        let real = text.find("[steps.real]").expect("real");
        assert_eq!(cuts, vec![real], "{case:?}");
    }
}

#[test]
fn a_file_with_other_tables_after_the_first_cut_is_not_cut() {
    for tail in [
        "[vars.late]\ndefault = 1\n",
        "[steps]\n",
        "[[moved]]\nfrom = \"a\"\nto = \"b\"\n",
        "  [workflow.state]\nbackend = \"local\"\n",
    ] {
        let text = format!("{}{tail}", workflow(40));
        assert_eq!(cut_points(&text, 1000), None, "{tail:?}");
    }
}

#[test]
fn pieces_that_could_mean_something_else_are_parsed_whole() {
    let big = workflow(200);
    let cases = [
        // A step's tables in two pieces (its inputs written at the end).
        format!("{big}[steps.s1.extra]\nx = 1\n"),
        // The same step twice: TOML's duplicate, reported by the whole parse.
        format!("{big}[steps.s2]\nprovider = \"null\"\n"),
        // `steps` inline in the first piece.
        format!(
            "steps = {{ a = {{ provider = \"null\" }} }}\n{}",
            &big[big.find("[steps.s0]").expect("s0")..]
        ),
        // A syntax error late in the file.
        format!("{big}[steps.bad]\nprovider = \n"),
        // A malformed reference late in the file.
        format!("{big}[steps.bad]\nprovider = \"${{steps.\"\n"),
    ];
    for text in cases {
        let src = source(&text);
        assert!(in_pieces(&src).is_none(), "{}", &text[text.len() - 60..]);
    }
}

#[test]
fn a_small_file_is_parsed_whole() {
    let text = workflow(10);
    assert!(in_pieces(&source(&text)).is_none());
}
