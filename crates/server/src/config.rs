//! Placeholder until the config-file mapping lands in the next commit.
use std::path::Path;

use crate::options::Options;

pub fn load(path: &Path) -> anyhow::Result<(Options, Vec<String>)> {
    anyhow::bail!("config files not yet supported: {}", path.display())
}
