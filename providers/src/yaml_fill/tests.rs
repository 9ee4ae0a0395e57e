//! Each value enters as a YAML scalar: ordinary values give the bytes a
//! plain paste gives, and values that would change the structure are
//! quoted, escaped or indented for their place. Every result is parsed
//! (serde-saphyr, as the providers read manifests) to prove the structure.

use serde_json::{Value, json};

use super::*;

/// `text` with `${NAME}` filled from `pairs`, through [`fill`].
fn fill_named(text: &str, pairs: &[(&str, &str)]) -> Result<String, Misfit> {
    let mut holes = Vec::new();
    for (name, value) in pairs {
        let token = format!("${{{name}}}");
        for (at, _) in text.match_indices(&token) {
            holes.push(Hole {
                range: at..at + token.len(),
                name,
                value,
            });
        }
    }
    holes.sort_by_key(|h| h.range.start);
    fill(text, &holes)
}

/// The same, as a sed would (today's behaviour).
fn pasted(text: &str, pairs: &[(&str, &str)]) -> String {
    pairs.iter().fold(text.to_string(), |t, (name, value)| {
        t.replace(&format!("${{{name}}}"), value)
    })
}

fn parsed(text: &str) -> Value {
    serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A pod the shape of the runbooks', with holes in every kind of place.
const POD: &str = r#"apiVersion: v1
kind: Pod
metadata:
  name: ${NAME}
  labels: {app: ${APP}, tier: "${TIER}"}
  annotations:
    note: 'by ${OWNER}'
spec:
  # runs ${NAME} on ${NODES} nodes
  containers:
    - name: main
      image: ${REGISTRY}/fsdp:${TAG}
      args: ["--nodes=${NODES}", "--name", "${NAME}"]
      resources:
        limits:
          nvidia.com/gpu: ${GPUS}
      command:
        - /bin/bash
        - -c
        - |
          set -e
          echo "training ${NAME}"
          for i in $(seq 1 ${NODES}); do
            echo ${APP}
          done
"#;

const ORDINARY: &[(&str, &str)] = &[
    ("NAME", "fsdp-llama"),
    ("APP", "train"),
    ("TIER", "gpu"),
    ("OWNER", "ml-team"),
    ("NODES", "2"),
    ("REGISTRY", "111122223333.dkr.ecr.us-west-2.amazonaws.com"),
    ("TAG", "v1.2"),
    ("GPUS", "8"),
];

#[test]
fn ordinary_values_give_the_bytes_a_paste_gives() {
    let out = fill_named(POD, ORDINARY).unwrap();
    assert_eq!(out, pasted(POD, ORDINARY));
    let pod = parsed(&out);
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        json!(8)
    );
    assert_eq!(
        pod["spec"]["containers"][0]["image"],
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/fsdp:v1.2"
    );
}

#[test]
fn the_injection_of_issue_17_renders_as_one_string() {
    let evil = "x\n  hostNetwork: true";
    let text = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ${NAME}\nspec:\n  containers: []\n";
    let out = fill_named(text, &[("NAME", evil)]).unwrap();
    let pod = parsed(&out);
    assert_eq!(pod["metadata"]["name"], evil);
    assert_eq!(pod["metadata"].as_object().unwrap().len(), 1, "{out}");
    assert!(pod["spec"].get("hostNetwork").is_none(), "{out}");
    assert!(pod.get("hostNetwork").is_none(), "{out}");
    assert_eq!(
        out,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"x\\n  hostNetwork: true\"\nspec:\n  containers: []\n"
    );
}

#[test]
fn a_value_that_would_break_any_place_stays_in_its_place() {
    let evil = "a\"\n    hostNetwork: true\n  x: '";
    let pairs: Vec<(&str, &str)> = ORDINARY
        .iter()
        .map(|&(k, v)| (k, if k == "NODES" || k == "GPUS" { v } else { evil }))
        .collect();
    // The comment's placeholders are refused with a line break (see
    // `what_cannot_be_placed_is_refused_with_its_line`): without it.
    let pod_text = POD.replace("  # runs ${NAME} on ${NODES} nodes\n", "");
    let out = fill_named(&pod_text, &pairs).unwrap();
    let pod = parsed(&out);
    // The structure is the template's: same keys, same list lengths.
    let template = parsed(&pasted(POD, ORDINARY));
    assert_eq!(keys(&pod), keys(&template), "{out}");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(pod["metadata"]["name"], evil);
    assert_eq!(pod["metadata"]["labels"]["app"], evil);
    assert_eq!(pod["metadata"]["labels"]["tier"], evil);
    assert_eq!(pod["metadata"]["annotations"]["note"], format!("by {evil}"));
    assert_eq!(c["image"], format!("{evil}/fsdp:{evil}"));
    assert_eq!(c["args"], json!(["--nodes=2", "--name", evil]));
    // Inside the literal block the value keeps its lines, indented as the
    // block, so the script holds it and nothing else changes.
    let script = c["command"][2].as_str().unwrap();
    assert!(script.starts_with("set -e\n"), "{script}");
    assert!(
        script.contains(&format!("echo \"training {evil}\"\n")),
        "{script}"
    );
    assert!(script.ends_with("done\n"), "{script}");
}

/// Every key path of `v` (list items by index), to compare structures.
fn keys(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => m
                .iter()
                .for_each(|(k, v)| walk(v, format!("{at}.{k}"), out)),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| walk(v, format!("{at}[{i}]"), out)),
            _ => out.push(at),
        }
    }
    walk(v, String::new(), &mut out);
    out
}

#[test]
fn values_that_look_like_yaml_become_strings() {
    for value in [
        "{a: 1}",
        "[1, 2]",
        "*anchor",
        "&a x",
        "- item",
        "-",
        "? k",
        "x # not a comment",
        "a: b",
        "|",
        "'q",
        " lead",
    ] {
        let out = fill_named("k: ${V}\nother: 1\n", &[("V", value)]).unwrap();
        assert_eq!(
            parsed(&out),
            json!({"k": value, "other": 1}),
            "{value:?} gave {out:?}"
        );
    }
    // In a flow list, a comma would split the item.
    let out = fill_named("k: [a, ${V}]\n", &[("V", "b, c")]).unwrap();
    assert_eq!(parsed(&out), json!({"k": ["a", "b, c"]}), "{out}");
}

#[test]
fn values_that_are_numbers_or_booleans_stay_typed_as_written_today() {
    let out = fill_named("n: ${N}\nb: ${B}\n", &[("N", "2"), ("B", "true")]).unwrap();
    assert_eq!(out, "n: 2\nb: true\n");
    // Also when another value in the same text has to be quoted.
    let out = fill_named(
        "n: ${N}\nflag: ${F}\nname: ${X}\n",
        &[("N", "-5"), ("F", "--fast"), ("X", "a\nb: c")],
    )
    .unwrap();
    assert_eq!(
        parsed(&out),
        json!({"n": -5, "flag": "--fast", "name": "a\nb: c"}),
        "{out}"
    );
    assert!(out.starts_with("n: -5\nflag: --fast\n"), "{out}");
}

#[test]
fn a_single_quoted_value_doubles_its_quotes_and_a_line_break_requotes_it() {
    let out = fill_named("k: 'it ${V}'\n", &[("V", "isn't")]).unwrap();
    assert_eq!(out, "k: 'it isn''t'\n");
    let out = fill_named("k: 'a ${V}'\nz: 1\n", &[("V", "b\nz: 2")]).unwrap();
    assert_eq!(parsed(&out), json!({"k": "a b\nz: 2", "z": 1}), "{out}");
}

#[test]
fn what_cannot_be_placed_is_refused_with_its_line() {
    let e = fill_named("a: 1\nk: >\n  text ${V}\n", &[("V", "x\ny")]).unwrap_err();
    assert_eq!(e.line, 3);
    assert!(e.message.contains("folded block (`>`)"), "{e}");
    let e = fill_named("a: 1 # by ${V}\n", &[("V", "x\nb: 2")]).unwrap_err();
    assert_eq!(e.line, 1);
    assert!(e.message.contains("its place is not a value"), "{e}");
    // Without a line break, a comment takes anything.
    assert_eq!(
        fill_named("a: 1 # ${V}\n", &[("V", "x: y")]).unwrap(),
        "a: 1 # x: y\n"
    );
}

#[test]
fn a_text_that_is_not_yaml_is_filled_as_text() {
    let text = "#!/bin/bash\nif [ ${N} -gt 1 ]; then echo {\"a\": ${N}; fi\n  : [\n";
    assert_eq!(
        fill_named(text, &[("N", "3")]).unwrap(),
        pasted(text, &[("N", "3")])
    );
}
