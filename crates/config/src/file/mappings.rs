//! `mappings` (alias `maps`), at the top level (the global account's) and
//! in an account block: nats-server's `parseAccountMappings`,
//! `parseAccountMapDest` and the checks of `AddWeightedMappings`, with
//! their error texts. Each error names the entry's file:line:col.

use conf::{Entry, Item, Value};

use super::Report;
use crate::options::{MapDest, Mapping, Options};

/// `mappings { src: dest, src: { destination, weight, cluster }, src:
/// [ ... ] }` of `account`.
pub(super) fn mappings(account: &str, e: &Entry, o: &mut Options, r: &mut Report) {
    let Value::Map(m) = &e.item.value else {
        let got = e.item.value.type_name();
        return r.error(&e.item, format!("Expected a map for mappings, got {got}"));
    };
    for entry in &m.entries {
        let src = &entry.key;
        if !subjects::is_valid_subject(src.as_bytes()) {
            r.error_at(entry, format!("Subject {src:?} is not a valid subject"));
            continue;
        }
        let dests = match &entry.item.value {
            Value::String(dest) => {
                let one = MapDest {
                    subject: dest.clone(),
                    weight: 100,
                    cluster: None,
                };
                if let Err(why) = crate::links::check_mapping(src, std::slice::from_ref(&one)) {
                    r.error(
                        &entry.item,
                        format!("Error adding mapping for {src:?} to {dest:?} : {why}"),
                    );
                    continue;
                }
                vec![one]
            }
            Value::Array(items) => items.iter().filter_map(|i| dest(i, r)).collect(),
            _ => match dest(&entry.item, r) {
                Some(d) => vec![d],
                None => continue,
            },
        };
        if !matches!(entry.item.value, Value::String(_)) {
            if let Err(why) = crate::links::check_mapping(src, &dests) {
                r.error(
                    &entry.item,
                    format!("Error adding mapping for {src:?} : {why}"),
                );
                continue;
            }
        }
        o.mappings.retain(|m| m.account != account || m.src != *src);
        o.mappings.push(Mapping {
            account: account.to_string(),
            src: src.clone(),
            dests,
        });
    }
}

/// One destination: `{ destination, weight, cluster }`.
fn dest(item: &Item, r: &mut Report) -> Option<MapDest> {
    let Value::Map(m) = &item.value else {
        r.error(item, "Expected an entry for the mapping destination");
        return None;
    };
    let (mut subject, mut weight, mut cluster) = (String::new(), None, None);
    for e in &m.entries {
        match e.key.to_ascii_lowercase().as_str() {
            "dest" | "destination" => subject = super::string(r, e)?,
            "weight" => weight = Some(self::weight(e, r)?),
            "cluster" => cluster = Some(super::string(r, e)?),
            _ => {
                r.error_at(
                    e,
                    format!("Unknown field {:?} for mapping destination", e.key),
                );
                return None;
            }
        }
    }
    let Some(weight) = weight else {
        r.error(
            item,
            format!("Missing weight for mapping destination {subject:?}"),
        );
        return None;
    };
    Some(MapDest {
        subject,
        weight,
        cluster,
    })
}

/// `40`, `"40"` or `"40%"`, 0 to 100.
fn weight(e: &Entry, r: &mut Report) -> Option<u8> {
    let n = match &e.item.value {
        Value::String(s) => {
            let digits = s.strip_suffix('%').unwrap_or(s);
            match digits.parse::<i64>() {
                Ok(n) => n,
                Err(_) => {
                    r.error(
                        &e.item,
                        format!("Invalid weight {digits:?} for mapping destination"),
                    );
                    return None;
                }
            }
        }
        Value::Integer(n) => *n,
        other => {
            r.error(
                &e.item,
                format!("Unknown entry type for weight of {}", other.type_name()),
            );
            return None;
        }
    };
    match u8::try_from(n) {
        Ok(w) if w <= 100 => Some(w),
        _ => {
            r.error(
                &e.item,
                format!("Invalid weight {n} for mapping destination"),
            );
            None
        }
    }
}
