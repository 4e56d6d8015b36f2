//! The config format: every syntax form, and every error path naming its
//! file, line and column.

use std::collections::HashMap;
use std::path::Path;

use flotilla_conf::{parse_file, parse_str, Map, Value};

fn parse_env(text: &str, env: &[(&str, &str)]) -> Result<Map, flotilla_conf::Error> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    parse_str(text, "test.conf", Path::new("."), &move |n| {
        env.get(n).cloned()
    })
}

fn parse(text: &str) -> Map {
    parse_env(text, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn err(text: &str) -> String {
    parse_env(text, &[]).expect_err("should fail").to_string()
}

fn get<'a>(m: &'a Map, k: &str) -> &'a Value {
    &m.get(k).unwrap_or_else(|| panic!("no key {k}")).item.value
}

#[test]
fn separators_and_scalars() {
    let m = parse(
        "a: 1\nb = 2\nc 3\nd: \"quoted\\tstr\"\ne: 'single $x'\nf: bare-string\n\
         g: true\nh: OFF\ni: 1.5\nj: -7\nk: 2016-05-04T18:53:41Z\nl: 127.0.0.1:4222\n",
    );
    assert_eq!(get(&m, "a"), &Value::Integer(1));
    assert_eq!(get(&m, "b"), &Value::Integer(2));
    assert_eq!(get(&m, "c"), &Value::Integer(3));
    assert_eq!(get(&m, "d"), &Value::String("quoted\tstr".into()));
    assert_eq!(get(&m, "e"), &Value::String("single $x".into()));
    assert_eq!(get(&m, "f"), &Value::String("bare-string".into()));
    assert_eq!(get(&m, "g"), &Value::Bool(true));
    assert_eq!(get(&m, "h"), &Value::Bool(false));
    assert_eq!(get(&m, "i"), &Value::Float(1.5));
    assert_eq!(get(&m, "j"), &Value::Integer(-7));
    assert_eq!(
        get(&m, "k"),
        &Value::DateTime("2016-05-04T18:53:41Z".into())
    );
    assert_eq!(get(&m, "l"), &Value::String("127.0.0.1:4222".into()));
}

#[test]
fn sizes_and_durations() {
    let m = parse("a: 1k\nb: 1KB\nc: 1MB\nd: 2m\ne: 10ms\nf: \"120s\"\ng: 1GiB\nh: 2t\n");
    assert_eq!(get(&m, "a"), &Value::Integer(1000));
    assert_eq!(get(&m, "b"), &Value::Integer(1024));
    assert_eq!(get(&m, "c"), &Value::Integer(1024 * 1024));
    // `2m` is a number in this format; its raw text stays available.
    assert_eq!(get(&m, "d"), &Value::Integer(2_000_000));
    assert_eq!(m.get("d").unwrap().item.raw, "2m");
    assert_eq!(get(&m, "e"), &Value::String("10ms".into()));
    assert_eq!(get(&m, "f"), &Value::String("120s".into()));
    assert_eq!(get(&m, "g"), &Value::Integer(1 << 30));
    assert_eq!(get(&m, "h"), &Value::Integer(2_000_000_000_000));
}

#[test]
fn blocks_arrays_comments() {
    let m = parse(
        "# comment\n// another\nauthorization {\n  user: a # trailing\n  pass = b; timeout: 3\n}\n\
         routes = [\n  nats://a:1, nats://b:2\n  nats://c:3, # c\n]\nports: [4222]\nempty {}\nnested: { x: [ {y: 1}, [2, 3] ] }\n",
    );
    let Value::Map(auth) = get(&m, "authorization") else {
        panic!()
    };
    assert_eq!(get(auth, "user"), &Value::String("a".into()));
    assert_eq!(get(auth, "pass"), &Value::String("b".into()));
    assert_eq!(get(auth, "timeout"), &Value::Integer(3));
    let Value::Array(routes) = get(&m, "routes") else {
        panic!()
    };
    let r: Vec<_> = routes.iter().map(|i| i.value.clone()).collect();
    assert_eq!(
        r,
        vec![
            Value::String("nats://a:1".into()),
            Value::String("nats://b:2".into()),
            Value::String("nats://c:3".into())
        ]
    );
    // nats-server's lexer fails on a number just before `]`; we read it.
    let Value::Array(ports) = get(&m, "ports") else {
        panic!()
    };
    assert_eq!(ports[0].value, Value::Integer(4222));
    assert_eq!(get(&m, "empty"), &Value::Map(Map::default()));
    let Value::Map(nested) = get(&m, "nested") else {
        panic!()
    };
    let Value::Array(x) = get(nested, "x") else {
        panic!()
    };
    assert_eq!(x.len(), 2);
}

#[test]
fn json_style_file_and_block_strings() {
    let m = parse("{\n  \"port\": 4222,\n  \"http\": 8222\n}\n");
    assert_eq!(get(&m, "port"), &Value::Integer(4222));
    let m = parse("text (\nline one\n  ) not the end\n)\nafter: 1\n");
    assert_eq!(
        get(&m, "text"),
        &Value::String("\nline one\n  ) not the end\n".into())
    );
    assert_eq!(get(&m, "after"), &Value::Integer(1));
}

#[test]
fn multibyte_suffixes_are_strings() {
    let m = parse("a: 1µs\nb: 2éb\n");
    assert_eq!(get(&m, "a"), &Value::String("1µs".into()));
    assert_eq!(get(&m, "b"), &Value::String("2éb".into()));
}

#[test]
fn last_duplicate_wins() {
    let m = parse("port: 1\nport: 2\n");
    assert_eq!(get(&m, "port"), &Value::Integer(2));
    assert_eq!(m.entries.len(), 1);
}

#[test]
fn variables() {
    let m = parse_env(
        "TOKEN: s3cr3t\nauthorization { token: $TOKEN }\nport: $PORT\nhash: $2a$11$abc\n",
        &[("PORT", "4333")],
    )
    .unwrap();
    let Value::Map(auth) = get(&m, "authorization") else {
        panic!()
    };
    assert_eq!(get(auth, "token"), &Value::String("s3cr3t".into()));
    assert!(m.get("TOKEN").unwrap().referenced);
    assert_eq!(
        get(&m, "port"),
        &Value::Integer(4333),
        "env values are typed"
    );
    assert_eq!(get(&m, "hash"), &Value::String("$2a$11$abc".into()));
    // Block scope: inner definitions shadow outer ones.
    let m = parse("x: 1\nb { x: 2, y: $x }\nz: $x\n");
    let Value::Map(b) = get(&m, "b") else {
        panic!()
    };
    assert_eq!(get(b, "y"), &Value::Integer(2));
    assert_eq!(get(&m, "z"), &Value::Integer(1));
}

#[test]
fn variable_errors() {
    assert_eq!(
        err("a: 1\nb: $MISSING\n"),
        "test.conf:2:4: variable reference for 'MISSING' on line 2 can not be found"
    );
    let e = parse_env("a: $SELF\n", &[("SELF", "$SELF")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("could not be parsed"), "{e}");
    let e = parse_env("a: $BAD\n", &[("BAD", "3xyz y")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("could not be parsed"), "{e}");
}

#[test]
fn syntax_errors_name_line_and_column() {
    let cases: &[(&str, &str)] = &[
        ("a: bar baz\n", "test.conf:1:8: Expected a top-level value to end with a new line, comment or EOF, but got 'b' instead."),
        ("a: 1\nb: \"open\n", "test.conf:3:1: Unexpected EOF."),
        ("a: 1\n  b:\n", "test.conf:2:5: Expected value but found new line"),
        ("a {\n  b: 1\n", "test.conf:3:1: Unexpected EOF processing map."),
        ("a: [1, 2\n", "test.conf:2:1: Unexpected EOF processing array."),
        ("a: [1 2]\n", "test.conf:1:7: Expected an array value terminator \",\" or an array terminator \"]\", but got '2' instead."),
        ("a: [,1]\n", "test.conf:1:5: Unexpected array value terminator ','."),
        ("a: \"\\q\"\n", "test.conf:1:6: Invalid escape character 'q'. Only the following escape characters are allowed: \\xXX, \\t, \\n, \\r, \\\", \\\\."),
        ("a: \"\\xZZ\"\n", "test.conf:1:7: Expected two hexadecimal digits after '\\x', but got 'ZZ'"),
        ("a: .5\n", "test.conf:1:4: Floats must start with a digit"),
        ("a: 2016-05-04\n", "test.conf:1:4: All ISO8601 dates must be in full Zulu form."),
        ("a: -x\n", "test.conf:1:5: Expected a digit but got 'x'."),
        ("a: 99999999999999999999\n", "test.conf:1:4: integer '99999999999999999999' is out of the range"),
        ("a: 9999999999999E\n", "test.conf:1:4: integer '9999999999999E' is out of the range"),
        (": 1\n", "test.conf:1:1: Unexpected key separator ':'."),
        ("a: 1\n}\n", "test.conf:2:1: Unexpected '}' at top level."),
        ("a (\nno end\n", "test.conf:3:1: Unexpected EOF processing block."),
        ("x {a: 1 b: 2}\n", "test.conf:1:9: Expected a map value to end with a new line, comment or EOF, but got 'b' instead."),
    ];
    for (text, want) in cases {
        assert_eq!(&err(text), want, "input: {text:?}");
    }
}

#[test]
fn includes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("auth.conf"), "user: a\npassword: b\n").unwrap();
    std::fs::write(
        dir.path().join("main.conf"),
        "port: 1\nauthorization {\n  include ./auth.conf\n}\ninclude 'more.conf'\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("more.conf"), "http: 8222\n").unwrap();
    let m = parse_file(&dir.path().join("main.conf")).unwrap();
    let Value::Map(auth) = get(&m, "authorization") else {
        panic!()
    };
    assert_eq!(get(auth, "user"), &Value::String("a".into()));
    assert_eq!(get(&m, "http"), &Value::Integer(8222));
    // Positions inside an included file name that file.
    assert!(auth
        .get("user")
        .unwrap()
        .key_pos
        .file
        .ends_with("auth.conf"));

    std::fs::write(dir.path().join("bad.conf"), "include missing.conf\n").unwrap();
    let e = parse_file(&dir.path().join("bad.conf"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad.conf:1:1: error parsing include file 'missing.conf'"),
        "{e}"
    );

    std::fs::write(dir.path().join("loop.conf"), "include loop.conf\n").unwrap();
    let e = parse_file(&dir.path().join("loop.conf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nested more than"), "{e}");

    std::fs::write(dir.path().join("inner_err.conf"), "a: 1\nb: [\n").unwrap();
    std::fs::write(dir.path().join("outer.conf"), "include inner_err.conf\n").unwrap();
    let e = parse_file(&dir.path().join("outer.conf"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("inner_err.conf:3:1: Unexpected EOF processing array."),
        "{e}"
    );
}

#[test]
fn missing_file() {
    let e = parse_file(Path::new("/nonexistent/x.conf"))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("/nonexistent/x.conf: error opening config file:"),
        "{e}"
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn never_panics(text in "[ -~\\n\\t{}\\[\\]$\"'#/()]{0,200}") {
            let _ = parse_env(&text, &[]);
        }
    }
}

/// A block may open on the line after its key, as nats.py's test configs
/// write it; a value after `:` may not (nats-server's lexer alike).
#[test]
fn a_block_may_open_on_the_next_line() {
    let m = parse("websocket\n{\n    port: 8080\n    no_tls: true\n}\n");
    let Value::Map(ws) = get(&m, "websocket") else {
        panic!("not a map");
    };
    assert!(matches!(get(ws, "port"), Value::Integer(8080)));
    assert_eq!(
        err("a:\n{ b: 1 }\n"),
        "test.conf:1:3: Expected value but found new line"
    );
}
