//! The stream log's entry format, pinned. Raft logs and snapshots written
//! by an earlier version must still decode, so every op's bytes are fixed
//! here (taken from the codec as it was before it was split per op): a
//! change to the format fails this test rather than a restarted cluster.
//! Then a property: every op, whatever its fields, comes back from its
//! bytes, and no strict prefix of them decodes.

use bytes::Bytes;
use flotilla_jsservice::stream_sm::{encode_publish, DecodeError, Entry, Op};
use jetstream::consumer::AccountConsumerLimits;
use proptest::prelude::*;

/// One entry of each code the format has, with its bytes in hex.
fn pinned() -> Vec<(Entry, &'static str)> {
    let e = |ts: i64, op: Op| Entry { ts, op };
    let b = Bytes::from_static;
    vec![
        (
            e(1, Op::Publish {
                subject: "s.1".into(),
                headers: None,
                payload: b(b"hi"),
            }),
            "01000000000000000103000000732e3100020000006869",
        ),
        (
            e(2, Op::Publish {
                subject: "s".into(),
                headers: Some(b(b"NATS/1.0\r\n\r\n")),
                payload: b(b""),
            }),
            "0200000000000000010100000073010c0000004e4154532f312e300d0a0d0a00000000",
        ),
        (
            e(4, Op::Pull {
                consumer: "C".into(),
                request: b(br#"{"batch":1}"#),
                reply: "_INBOX.1".into(),
            }),
            "04000000000000000301000000430b0000007b226261746368223a317d080000005f494e424f582e31",
        ),
        (
            e(5, Op::Ack {
                consumer: "C".into(),
                subject: "$JS.ACK.S.C.1.2.3.4.0".into(),
                body: b(b"+ACK"),
            }),
            "050000000000000004010000004315000000244a532e41434b2e532e432e312e322e332e342e30040000002b41434b",
        ),
        (e(6, Op::Tick), "060000000000000005"),
        (
            e(7, Op::Purge {
                request: b(br#"{"keep":1}"#),
            }),
            "0700000000000000060a0000007b226b656570223a317d",
        ),
        (
            e(8, Op::DeleteMsg {
                seq: 258,
                erase: true,
            }),
            "080000000000000007020100000000000001",
        ),
        (e(9, Op::DeleteConsumer { name: "D".into() }), "0900000000000000080100000044"),
        (
            e(10, Op::Sourced {
                key: "O > >".into(),
                origin_seq: 7,
                origin_ts: -1,
                pending: 2,
                after: None,
                subject: "o.1".into(),
                headers: None,
                payload: b(b"x"),
            }),
            "0a0000000000000009050000004f203e203e0700000000000000ffffffffffffffff0200000000000000030000006f2e31000100000078",
        ),
        (
            e(11, Op::Sourced {
                key: "O".into(),
                origin_seq: 8,
                origin_ts: 9,
                pending: 0,
                after: Some(7),
                subject: "o".into(),
                headers: Some(b(b"NATS/1.0\r\nA: b\r\n\r\n")),
                payload: b(b"y"),
            }),
            "0b0000000000000015010000004f0800000000000000090000000000000000000000000000000700000000000000010000006f01120000004e4154532f312e300d0a413a20620d0a0d0a0100000079",
        ),
        (
            e(12, Op::ConsumerCreate {
                request: b(b"{}"),
                subject_name: Some("C".into()),
                filter: Some("f.>".into()),
                durable_api: true,
                generated: "G".into(),
                identity: None,
                limits: AccountConsumerLimits::default(),
            }),
            "0c000000000000000a020000007b7d0101000000430103000000662e3e010100000047",
        ),
        (
            e(13, Op::ConsumerCreate {
                request: b(b"{}"),
                subject_name: None,
                filter: None,
                durable_api: false,
                generated: "G".into(),
                identity: Some("abcdefgh".into()),
                limits: AccountConsumerLimits::default(),
            }),
            "0d0000000000000017020000007b7d0000000100000047080000006162636465666768",
        ),
        (
            e(14, Op::ConsumerCreate {
                request: b(b"{}"),
                subject_name: None,
                filter: None,
                durable_api: false,
                generated: "G".into(),
                identity: Some("id".into()),
                limits: AccountConsumerLimits {
                    max_consumers: 3,
                    max_ack_pending: -1,
                },
            }),
            "0e000000000000001a020000007b7d0000000100000047010200000069640300000000000000ffffffffffffffff",
        ),
        (
            e(15, Op::ConsumerCreate {
                request: b(b""),
                subject_name: None,
                filter: None,
                durable_api: false,
                generated: "".into(),
                identity: None,
                limits: AccountConsumerLimits {
                    max_consumers: 0,
                    max_ack_pending: 5,
                },
            }),
            "0f000000000000001a00000000000000000000000000000000000000000500000000000000",
        ),
        (
            e(16, Op::Tick.replied(Some("_INBOX.r"))),
            "10000000000000000b080000005f494e424f582e7205",
        ),
        (
            e(17, Op::UpdateConfig {
                config: b(br#"{"name":"S"}"#),
            }),
            "11000000000000000c0c0000007b226e616d65223a2253227d",
        ),
        (
            e(18, Op::PushInterest {
                consumer: "P".into(),
                active: true,
            }),
            "12000000000000000d010000005001",
        ),
        (
            e(19, Op::FlowControl {
                consumer: "P".into(),
                subject: "$JS.FC.S.P.x".into(),
                last: None,
            }),
            "13000000000000000e01000000500c000000244a532e46432e532e502e78",
        ),
        (
            e(20, Op::FlowControl {
                consumer: "P".into(),
                subject: "$JS.FC.S.P.y".into(),
                last: Some((10, 4)),
            }),
            "14000000000000001401000000500c000000244a532e46432e532e502e790a000000000000000400000000000000",
        ),
        (
            e(21, Op::PauseConsumer {
                name: "C".into(),
                until: Some(1_000),
            }),
            "15000000000000000f010000004301e803000000000000",
        ),
        (
            e(22, Op::PauseConsumer {
                name: "C".into(),
                until: None,
            }),
            "16000000000000000f0100000043000000000000000000",
        ),
        (
            e(23, Op::Barrier {
                peer: 0xfeed,
                token: 7,
            }),
            "170000000000000010edfe0000000000000700000000000000",
        ),
        (
            e(24, Op::UnpinConsumer {
                name: "C".into(),
                group: "g".into(),
            }),
            "18000000000000001101000000430100000067",
        ),
        (
            e(25, Op::ResetConsumer {
                name: "C".into(),
                seq: 9,
                identity: false,
            }),
            "19000000000000001201000000430900000000000000",
        ),
        (
            e(26, Op::DropPulls {
                consumer: "C".into(),
                replies: vec!["_INBOX.a".into(), "".into()],
            }),
            "1a0000000000000013010000004302000000080000005f494e424f582e6100000000",
        ),
        (
            e(27, Op::SourceFlowControl {
                key: "O".into(),
                stream_seq: 5,
                consumer_seq: 6,
            }),
            "1b0000000000000016010000004f05000000000000000600000000000000",
        ),
        (
            e(28, Op::ResetConsumer {
                name: "C".into(),
                seq: 0,
                identity: true,
            }),
            "1c000000000000001801000000430000000000000000",
        ),
        (
            e(29, Op::ResetSource { key: "O".into() }),
            "1d0000000000000019010000004f",
        ),
        (
            e(30, Op::Copies {
                copies: vec![
                    Op::Sourced {
                        key: "O".into(),
                        origin_seq: 1,
                        origin_ts: 2,
                        pending: 0,
                        after: None,
                        subject: "o".into(),
                        headers: None,
                        payload: b(b"a"),
                    },
                    Op::Sourced {
                        key: "O".into(),
                        origin_seq: 2,
                        origin_ts: 3,
                        pending: 0,
                        after: Some(1),
                        subject: "o".into(),
                        headers: None,
                        payload: b(b"b"),
                    },
                ],
            }),
            concat!(
                "1e00000000000000", "1b", "02000000",
                "09", "010000004f", "0100000000000000", "0200000000000000",
                "0000000000000000", "010000006f", "00", "0100000061",
                "15", "010000004f", "0200000000000000", "0300000000000000",
                "0000000000000000", "0100000000000000", "010000006f", "00", "0100000062",
            ),
        ),
        (
            e(-1, Op::Publish {
                subject: "p".into(),
                headers: None,
                payload: b(b"z"),
            }
            .replied(Some("r"))),
            "ffffffffffffffff0b010000007201010000007000010000007a",
        ),
    ]
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Which variant an op is: a new variant fails to compile here until it
/// is given a number, and [`VARIANTS`] tells the tests to cover it.
fn variant(op: &Op) -> usize {
    match op {
        Op::Publish { .. } => 0,
        Op::Pull { .. } => 1,
        Op::Ack { .. } => 2,
        Op::Tick => 3,
        Op::Purge { .. } => 4,
        Op::DeleteMsg { .. } => 5,
        Op::DeleteConsumer { .. } => 6,
        Op::Sourced { .. } => 7,
        Op::ConsumerCreate { .. } => 8,
        Op::Replied { .. } => 9,
        Op::UpdateConfig { .. } => 10,
        Op::PushInterest { .. } => 11,
        Op::FlowControl { .. } => 12,
        Op::PauseConsumer { .. } => 13,
        Op::DropPulls { .. } => 14,
        Op::SourceFlowControl { .. } => 15,
        Op::ResetSource { .. } => 16,
        Op::ResetConsumer { .. } => 17,
        Op::UnpinConsumer { .. } => 18,
        Op::Barrier { .. } => 19,
        Op::Copies { .. } => 20,
    }
}

const VARIANTS: usize = 21;

#[test]
fn every_code_encodes_and_decodes_as_pinned() {
    let mut seen = [false; VARIANTS];
    let mut codes = std::collections::BTreeSet::new();
    for (entry, want) in pinned() {
        let bytes = entry.encode();
        assert_eq!(hex(&bytes), want, "{entry:?} encodes as before");
        assert_eq!(Entry::decode(&unhex(want)), Ok(entry.clone()), "{want}");
        seen[variant(&entry.op)] = true;
        codes.insert(bytes[8]);
    }
    assert!(seen.iter().all(|s| *s), "every variant is pinned: {seen:?}");
    // 11 is `Replied`; then every other code the format has, but 2, the
    // retired legacy `CreateConsumer`.
    let all: std::collections::BTreeSet<u8> = (1..=27).filter(|c| *c != 2).collect();
    assert_eq!(codes, all, "every code is pinned");
}

#[test]
fn unknown_codes_and_nested_replies_are_refused() {
    let mut b = vec![0u8; 8];
    // 2 was the legacy `CreateConsumer`, retired unwritten by any server.
    for code in [0, 2, 28, 255] {
        b.truncate(8);
        b.push(code);
        assert_eq!(Entry::decode(&b), Err(DecodeError::Kind(code)));
    }
    // A reply holds one plain op, not another reply.
    let nested = unhex("0100000000000000" /* ts */);
    let mut nested = nested;
    nested.extend(unhex("0b0100000072")); // Replied to "r"
    nested.extend(unhex("0b0100000073")); // Replied to "s"
    nested.push(5); // Tick
    assert_eq!(Entry::decode(&nested), Err(DecodeError::Kind(11)));
    // A run holds copies only, and a count its bytes cannot hold is
    // refused before anything is set aside for it.
    let mut run = unhex("01000000000000001b01000000");
    run.push(5); // Tick
    run.extend([0; 40]); // what a copy would take
    assert_eq!(Entry::decode(&run), Err(DecodeError::Kind(5)));
    let huge = unhex("01000000000000001bffffffff");
    assert_eq!(Entry::decode(&huge), Err(DecodeError::Short));
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_.$>*-]{0,12}",
        any::<String>().prop_map(|s| s.chars().take(6).collect()),
    ]
}

fn blob() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn limits() -> impl Strategy<Value = AccountConsumerLimits> {
    let value = prop_oneof![Just(0i64), Just(-1i64), any::<i64>()];
    (value.clone(), value).prop_map(|(max_consumers, max_ack_pending)| AccountConsumerLimits {
        max_consumers,
        max_ack_pending,
    })
}

/// An `Op::Sourced`, with any fields.
fn sourced() -> impl Strategy<Value = Op> {
    (
        (text(), any::<u64>(), any::<i64>(), any::<u64>()),
        prop::option::of(any::<u64>()),
        (text(), prop::option::of(blob()), blob()),
    )
        .prop_map(
            |((key, origin_seq, origin_ts, pending), after, (subject, headers, payload))| {
                Op::Sourced {
                    key,
                    origin_seq,
                    origin_ts,
                    pending,
                    after,
                    subject,
                    headers,
                    payload,
                }
            },
        )
}

/// Every variant but `Replied`, with any fields.
fn plain_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (text(), prop::option::of(blob()), blob()).prop_map(|(subject, headers, payload)| {
            Op::Publish {
                subject,
                headers,
                payload,
            }
        }),
        (text(), blob(), text()).prop_map(|(consumer, request, reply)| Op::Pull {
            consumer,
            request,
            reply,
        }),
        (text(), text(), blob()).prop_map(|(consumer, subject, body)| Op::Ack {
            consumer,
            subject,
            body,
        }),
        Just(Op::Tick),
        blob().prop_map(|request| Op::Purge { request }),
        (any::<u64>(), any::<bool>()).prop_map(|(seq, erase)| Op::DeleteMsg { seq, erase }),
        text().prop_map(|name| Op::DeleteConsumer { name }),
        sourced(),
        prop::collection::vec(sourced(), 0..4).prop_map(|copies| Op::Copies { copies }),
        (
            (blob(), prop::option::of(text()), prop::option::of(text())),
            (any::<bool>(), text(), prop::option::of(text()), limits()),
        )
            .prop_map(
                |((request, subject_name, filter), (durable_api, generated, identity, limits))| {
                    Op::ConsumerCreate {
                        request,
                        subject_name,
                        filter,
                        durable_api,
                        generated,
                        identity,
                        limits,
                    }
                }
            ),
        blob().prop_map(|config| Op::UpdateConfig { config }),
        (text(), any::<bool>())
            .prop_map(|(consumer, active)| Op::PushInterest { consumer, active }),
        (text(), text(), prop::option::of(any::<(u64, u64)>())).prop_map(
            |(consumer, subject, last)| Op::FlowControl {
                consumer,
                subject,
                last,
            }
        ),
        (text(), prop::option::of(any::<i64>()))
            .prop_map(|(name, until)| Op::PauseConsumer { name, until }),
        (text(), prop::collection::vec(text(), 0..4))
            .prop_map(|(consumer, replies)| Op::DropPulls { consumer, replies }),
        (text(), any::<u64>(), any::<u64>()).prop_map(|(key, stream_seq, consumer_seq)| {
            Op::SourceFlowControl {
                key,
                stream_seq,
                consumer_seq,
            }
        }),
        text().prop_map(|key| Op::ResetSource { key }),
        (text(), any::<u64>(), any::<bool>()).prop_map(|(name, seq, identity)| {
            Op::ResetConsumer {
                name,
                seq,
                identity,
            }
        }),
        (text(), text()).prop_map(|(name, group)| Op::UnpinConsumer { name, group }),
        (any::<u64>(), any::<u64>()).prop_map(|(peer, token)| Op::Barrier { peer, token }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    (plain_op(), prop::option::of(text())).prop_map(|(op, reply)| op.replied(reply.as_deref()))
}

/// What an op reads back as: account limits that are none (0 or less
/// each) are written as none and read as the default.
fn read_back(op: &Op) -> Op {
    match op.clone() {
        Op::ConsumerCreate {
            request,
            subject_name,
            filter,
            durable_api,
            generated,
            identity,
            limits,
        } => Op::ConsumerCreate {
            request,
            subject_name,
            filter,
            durable_api,
            generated,
            identity,
            limits: if limits.is_none() {
                AccountConsumerLimits::default()
            } else {
                limits
            },
        },
        Op::Replied { reply, op } => Op::Replied {
            reply,
            op: Box::new(read_back(&op)),
        },
        other => other,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Every op comes back from its bytes (shared or copied), its bytes
    /// again give the same bytes, and no strict prefix decodes.
    #[test]
    fn every_op_round_trips(ts in any::<i64>(), op in op()) {
        let entry = Entry { ts, op };
        let bytes = entry.encode();
        let want = Entry { ts, op: read_back(&entry.op) };
        prop_assert_eq!(Entry::decode(&bytes), Ok(want.clone()));
        let shared = Bytes::from(bytes.clone());
        prop_assert_eq!(Entry::decode_shared(&shared), Ok(want.clone()));
        prop_assert_eq!(want.encode(), bytes.clone());
        for cut in 0..bytes.len() {
            prop_assert!(Entry::decode(&bytes[..cut]).is_err(), "prefix {} of {}", cut, bytes.len());
        }
    }

    /// A publish's entry written straight from the message is the entry's.
    #[test]
    fn a_publish_encodes_straight_as_its_entry(
        ts in any::<i64>(),
        reply in prop::option::of(text()),
        subject in text(),
        headers in prop::option::of(blob()),
        payload in blob(),
    ) {
        let op = Op::Publish { subject: subject.clone(), headers: headers.clone(), payload: payload.clone() };
        let entry = Entry { ts, op: op.replied(reply.as_deref()) };
        prop_assert_eq!(
            encode_publish(ts, reply.as_deref(), &subject, headers.as_deref(), &payload),
            entry.encode()
        );
    }
}
