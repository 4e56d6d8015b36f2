//! The parser yields the same operations, and the same error, whichever
//! byte boundaries the input arrives split at; and it never panics.

use flotilla_protocol::{ClientOp, ParseError, Parsed, Parser};
use proptest::prelude::*;

/// An owned copy of an operation, to compare runs.
fn own(op: &ClientOp<'_>) -> String {
    format!("{op:?}")
}

/// Feeds `input` in chunks ending at `cuts`, as a connection driver does:
/// append, then parse until more bytes are needed.
fn run(input: &[u8], cuts: &[usize], max_control_line: usize) -> (Vec<String>, Option<ParseError>) {
    let mut parser = Parser::new(max_control_line, 1024);
    parser.set_headers(true);
    let mut buf: Vec<u8> = Vec::new();
    let mut ops = Vec::new();
    let mut start = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    ends.push(input.len());
    ends.sort();
    for end in ends {
        if end < start {
            continue;
        }
        buf.extend_from_slice(&input[start..end]);
        start = end;
        loop {
            match parser.parse(&buf) {
                Ok(Parsed::Op(op, n)) => {
                    assert!(n > 0 && n <= buf.len());
                    ops.push(own(&op));
                    buf.drain(..n);
                }
                Ok(Parsed::Incomplete { .. }) => break,
                Ok(Parsed::Skipped(n)) => {
                    assert!(n > 0 && n <= buf.len());
                    buf.drain(..n);
                }
                // How much of an over-long line had arrived varies with the
                // split; the error itself must not.
                Err(ParseError::ControlLineTooLong { max, .. }) => {
                    return (ops, Some(ParseError::ControlLineTooLong { len: 0, max }))
                }
                Err(e) => return (ops, Some(e)),
            }
        }
    }
    (ops, None)
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z]{1,6}", Just("*".to_string()), Just(">".to_string())]
}

fn subject() -> impl Strategy<Value = String> {
    prop::collection::vec(token(), 1..4).prop_map(|t| t.join("."))
}

fn op() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (
            subject(),
            prop::option::of(subject()),
            prop::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(s, r, p)| {
                let mut v = match r {
                    Some(r) => format!("PUB {s} {r} {}\r\n", p.len()),
                    None => format!("pub {s}\t{}\r\n", p.len()),
                }
                .into_bytes();
                v.extend_from_slice(&p);
                v.extend_from_slice(b"\r\n");
                v
            }),
        (subject(), prop::collection::vec(any::<u8>(), 0..20)).prop_map(|(s, p)| {
            let h = b"NATS/1.0\r\nA: b\r\n\r\n";
            let mut v = format!("HPUB {s} {} {}\r\n", h.len(), h.len() + p.len()).into_bytes();
            v.extend_from_slice(h);
            v.extend_from_slice(&p);
            v.extend_from_slice(b"\r\n");
            v
        }),
        (subject(), prop::option::of("[a-z]{1,4}"), 1u32..1000).prop_map(|(s, q, sid)| match q {
            Some(q) => format!("SUB {s} {q} {sid}\r\n").into_bytes(),
            None => format!("SUB {s} {sid}\n").into_bytes(),
        }),
        (1u32..1000, prop::option::of(0u32..10)).prop_map(|(sid, m)| match m {
            Some(m) => format!("UNSUB {sid} {m}\r\n").into_bytes(),
            None => format!("unsub {sid}\r\n").into_bytes(),
        }),
        Just(b"PING\r\n".to_vec()),
        Just(b"PONG\r\n".to_vec()),
        Just(b"CONNECT {\"verbose\":false}\r\n".to_vec()),
        // Invalid input, so error paths are compared too.
        prop::collection::vec(any::<u8>(), 1..12),
        Just(b"PUB a 2\r\nabcdef\r\n".to_vec()),
        Just(b"SUB x\r\n".to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn same_ops_whatever_the_split(
        ops in prop::collection::vec(op(), 1..12),
        cuts in prop::collection::vec(any::<usize>(), 0..20),
        mcl in prop_oneof![Just(4096usize), 4usize..40],
    ) {
        let input: Vec<u8> = ops.concat();
        let whole = run(&input, &[], mcl);
        let split = run(&input, &cuts, mcl);
        prop_assert_eq!(&whole, &split);
        let bytewise: Vec<usize> = (0..input.len()).collect();
        prop_assert_eq!(&whole, &run(&input, &bytewise, mcl));
    }

    #[test]
    fn never_panics(input in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = run(&input, &[], 64);
    }
}
