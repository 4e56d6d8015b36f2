//! Checks of exports and imports as plain data, wherever they come from
//! (the config file's account blocks, account JWTs): nats-server's
//! `addStreamExportWithAccountPos`, `checkStreamImportAuthorized` and
//! `checkServiceImportAuthorized`, its duplicate checks and its cycle
//! searches, with their error texts.

use std::collections::{HashMap, HashSet};

use crate::options::{Export, Import, LinkKind, MapDest};

/// An export's subject is valid, and holds a `*` at the token position
/// it names.
pub fn check_export(export: &Export) -> Result<(), String> {
    export_subject(export)
}

/// The imports accepted so far, against `exports`, indexed so that each
/// check looks only at what it can meet: a config or an operator with a
/// thousand accounts of ten imports each is checked in linear time, not
/// by comparing every import with every other.
pub struct Admitted<'a> {
    exports: HashMap<&'a str, Vec<&'a Export>>,
    imports: Vec<Import>,
    /// `imports`' positions, by importing account.
    by_account: HashMap<String, Vec<usize>>,
    /// Stream imports' (importer, exporter, subject).
    streams: HashSet<(String, String, String)>,
}

impl<'a> Admitted<'a> {
    pub fn new(exports: &'a [Export]) -> Self {
        let mut by_account: HashMap<&str, Vec<&Export>> = HashMap::new();
        for e in exports {
            by_account.entry(e.account.as_str()).or_default().push(e);
        }
        Admitted {
            exports: by_account,
            imports: Vec::new(),
            by_account: HashMap::new(),
            streams: HashSet::new(),
        }
    }

    /// Accepts `import` if its subjects map, an export authorizes it, it
    /// is no duplicate, and it forms no cycle; else nats-server's reason.
    pub fn admit(&mut self, import: Import) -> Result<(), String> {
        self.check(&import)?;
        if import.kind == LinkKind::Stream {
            let key = (
                import.account.clone(),
                import.from.clone(),
                import.subject.clone(),
            );
            self.streams.insert(key);
        }
        let at = self.imports.len();
        self.by_account
            .entry(import.account.clone())
            .or_default()
            .push(at);
        self.imports.push(import);
        Ok(())
    }

    fn check(&self, import: &Import) -> Result<(), String> {
        import_subjects(import)?;
        let exports = self.exports.get(import.from.as_str());
        authorized(exports.into_iter().flatten().copied(), import)?;
        self.duplicate(import)?;
        self.cycle(import)
    }

    /// Everything accepted, in the order it came.
    pub fn into_imports(self) -> Vec<Import> {
        self.imports
    }

    fn duplicate(&self, import: &Import) -> Result<(), String> {
        let key = (
            import.account.clone(),
            import.from.clone(),
            import.subject.clone(),
        );
        if import.kind == LinkKind::Stream && self.streams.contains(&key) {
            return Err("stream import already exists".into());
        }
        Ok(())
    }

    /// nats-server's `serviceImportFormsCycle`/`streamImportFormsCycle`:
    /// what the import brings from its exporter must not reach the
    /// exporter through the importer. From the exporter, every import of
    /// the same kind whose local subject meets the subject is followed to
    /// its own exporter; reaching an account already on the path is a
    /// cycle.
    fn cycle(&self, import: &Import) -> Result<(), String> {
        const MAX_DEPTH: usize = 1024;
        let mut path = vec![import.account.as_str()];
        let mut todo = vec![(import.from.as_str(), import.subject.as_str(), 1usize)];
        while let Some((account, subject, depth)) = todo.pop() {
            if depth >= MAX_DEPTH {
                return Err("search cycle depth exhausted".into());
            }
            path.truncate(depth);
            path.push(account);
            let theirs = self.by_account.get(account).into_iter().flatten();
            for next in theirs.map(|&at| &self.imports[at]).filter(|i| {
                debug_assert_eq!(i.account, account, "indexed by importer");
                i.kind == import.kind
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
}

/// A service export's `latency` can be tracked (nats-server's
/// `TrackServiceExportWithSampling`): the sampling is a percentage or
/// headers, the results subject a publish subject that none of the
/// exporter's service exports (`exports`, every account's) covers, so
/// results never loop back into the service, and the service answers once.
pub fn check_latency<'e>(
    export: &Export,
    mut exports: impl Iterator<Item = &'e Export>,
) -> Result<(), String> {
    let Some(latency) = &export.latency else {
        return Ok(());
    };
    debug_assert_eq!(export.kind, LinkKind::Service, "parsers refuse the rest");
    if latency.sampling > 100 {
        return Err("bad sampling percentage, should be 1-100".into());
    }
    let results = latency.results.as_bytes();
    let covered = exports.any(|e| {
        e.account == export.account
            && e.kind == LinkKind::Service
            && subjects::subject_matches_filter(results, e.subject.as_bytes())
    });
    if !subjects::is_valid_publish_subject(results) || covered {
        return Err("invalid publish subject".into());
    }
    if export.response != crate::options::ResponseType::Singleton {
        return Err("bad service response type".into());
    }
    Ok(())
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
/// one of the exporter's `exports` of the same kind covers the subject, lists the importer (or
/// nobody, or checked the importer's activation token), and holds its
/// name at the token position it names.
fn authorized<'e>(
    mut exports: impl Iterator<Item = &'e Export>,
    import: &Import,
) -> Result<(), String> {
    let kind = import.kind.as_str();
    let allowed = exports.any(|e| {
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
