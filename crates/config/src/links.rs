//! Checks of exports and imports as plain data, wherever they come from
//! (the config file's account blocks, account JWTs): nats-server's
//! `addStreamExportWithAccountPos`, `checkStreamImportAuthorized` and
//! `checkServiceImportAuthorized`, its duplicate checks and its cycle
//! searches, with their error texts.

use crate::options::{Export, Import, LinkKind, MapDest};

/// An export's subject is valid, and holds a `*` at the token position
/// it names.
pub fn check_export(export: &Export) -> Result<(), String> {
    export_subject(export)
}

/// An import may join `imports` (those already accepted): its subjects
/// map, an export of `exports` authorizes it, it is no duplicate, and it
/// forms no cycle. `Err` is nats-server's reason.
pub fn check_import(exports: &[Export], imports: &[Import], import: &Import) -> Result<(), String> {
    import_subjects(import)?;
    authorized(exports, import)?;
    duplicate(imports, import)?;
    cycle(imports, import)
}

/// nats-server's `addStreamExportWithAccountPos` and its service twin.
fn export_subject(export: &Export) -> Result<(), String> {
    if !subjects::is_valid_subject(export.subject.as_bytes()) {
        return Err("sublist: invalid subject".into());
    }
    if let Some(at) = export.account_token_position {
        if export.subject.split('.').nth(at - 1) != Some("*") {
            return Err("sublist: invalid subject".into());
        }
    }
    Ok(())
}

/// Both subjects valid, and each way between them a map that can be
/// built (`*` in `to` stands for the subject's wildcard at its place),
/// as `flotilla_core::account::imports::SubjectMap` builds them.
fn import_subjects(import: &Import) -> Result<(), String> {
    let local = import.local_subject();
    if !subjects::is_valid_subject(import.subject.as_bytes())
        || !subjects::is_valid_subject(local.as_bytes())
    {
        return Err("sublist: invalid subject".into());
    }
    for (src, dest) in [
        (import.subject.as_str(), local),
        (local, import.subject.as_str()),
    ] {
        if src == dest || subjects::is_literal(dest.as_bytes()) {
            continue;
        }
        let tokenized = subjects::transform::tokenize(dest);
        subjects::transform::Transform::new(src, &tokenized).map_err(|e| {
            format!(
                "failed to create mapping transform for {} import subject from {:?} to {:?}: {e}",
                import.kind.as_str(),
                import.subject,
                local
            )
        })?;
    }
    Ok(())
}

/// nats-server's `checkStreamImportAuthorized`/`checkServiceImportAuthorized`:
/// an export of the same kind covers the subject, lists the importer (or
/// nobody, or checked the importer's activation token), and holds its
/// name at the token position it names.
fn authorized(exports: &[Export], import: &Import) -> Result<(), String> {
    let kind = import.kind.as_str();
    let allowed = exports.iter().any(|e| {
        e.account == import.from
            && e.kind == import.kind
            && subjects::subject_matches_filter(import.subject.as_bytes(), e.subject.as_bytes())
            && if e.token_req {
                import.activated
            } else {
                e.accounts.is_empty() || e.accounts.contains(&import.account)
            }
            && e.account_token_position.is_none_or(|at| {
                import.subject.split('.').nth(at - 1) == Some(import.account.as_str())
            })
    });
    if allowed {
        Ok(())
    } else {
        Err(format!("{kind} import not authorized"))
    }
}

fn duplicate(imports: &[Import], import: &Import) -> Result<(), String> {
    let twin = imports.iter().any(|i| {
        i.kind == LinkKind::Stream
            && import.kind == LinkKind::Stream
            && i.account == import.account
            && i.from == import.from
            && i.subject == import.subject
    });
    if twin {
        return Err("stream import already exists".into());
    }
    Ok(())
}

/// nats-server's `serviceImportFormsCycle`/`streamImportFormsCycle`:
/// what the import brings from its exporter must not reach the exporter
/// through the importer. From the exporter, every import of the same
/// kind whose local subject meets the subject is followed to its own
/// exporter; reaching an account already on the path is a cycle.
fn cycle(imports: &[Import], import: &Import) -> Result<(), String> {
    const MAX_DEPTH: usize = 1024;
    let mut path = vec![import.account.as_str()];
    let mut todo = vec![(import.from.as_str(), import.subject.as_str(), 1usize)];
    while let Some((account, subject, depth)) = todo.pop() {
        if depth >= MAX_DEPTH {
            return Err("search cycle depth exhausted".into());
        }
        path.truncate(depth);
        path.push(account);
        for next in imports.iter().filter(|i| {
            i.account == account
                && i.kind == import.kind
                && subjects::subjects_collide(i.local_subject().as_bytes(), subject.as_bytes())
        }) {
            if path.contains(&next.from.as_str()) {
                return Err("import forms a cycle".into());
            }
            todo.push((next.from.as_str(), next.subject.as_str(), depth + 1));
        }
    }
    Ok(())
}

/// nats-server's `AddWeightedMappings`: no destination twice, each
/// weight and each cluster's total at most 100, each destination a
/// valid transform of `src` (`ValidateMapping`).
pub fn check_mapping(src: &str, dests: &[MapDest]) -> Result<(), String> {
    if !subjects::is_valid_subject(src.as_bytes()) {
        return Err("invalid subject".into());
    }
    let mut totals: std::collections::BTreeMap<Option<&str>, u32> = Default::default();
    for (i, d) in dests.iter().enumerate() {
        if dests[..i].iter().any(|e| e.subject == d.subject) {
            return Err(format!("duplicate entry for {:?}", d.subject));
        }
        if d.weight > 100 {
            return Err("individual weights need to be <= 100".into());
        }
        let total = totals.entry(d.cluster.as_deref()).or_default();
        *total += u32::from(d.weight);
        if *total > 100 {
            return Err("total weight needs to be <= 100".into());
        }
        subjects::transform::Transform::mapping(src, &d.subject)?;
    }
    Ok(())
}
