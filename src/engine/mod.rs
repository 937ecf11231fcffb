//! The kernel machinery under every op: kernel keys and operand tables (as data), the
//! WGSL assembly, the loop rule, the pipeline and parameter caches, the device and its
//! [`runtime::Runtime`], the validated dispatch ([`encode::Prepared`]) and the host
//! path. It knows no op: an op is an [`key::OpInfo`] and an [`key::OpKernel`] handed to
//! it from `src/op/` (a test checks that nothing here imports from there or from the
//! backends above).

pub(crate) mod cache;
pub(crate) mod device;
pub(crate) mod encode;
pub(crate) mod host;
pub(crate) mod key;
pub(crate) mod loops;
pub(crate) mod operand;
pub(crate) mod runtime;
pub(crate) mod scope;
pub(crate) mod source;
pub(crate) mod timestamps;
#[cfg(feature = "translate")]
pub(crate) mod translate;
pub(crate) mod wgsl;

#[cfg(test)]
mod tests {
    /// The machinery points one way: no file of `src/engine/` names the ops, the
    /// backends, the rollback or the tuning table above it (comments aside).
    #[test]
    fn the_engine_imports_nothing_from_above() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
        // Written in two parts, so that this list does not name them itself.
        let above: Vec<String> = [
            "op",
            "gpu",
            "rollback",
            "backend",
            "tuning",
            "cpu",
            "models",
            "host",
            "Backend",
            "GpuBackend",
        ]
        .iter()
        .map(|name| format!("crate::{name}"))
        .collect();
        let mut files = 0;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            files += 1;
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for name in above.iter().filter(|name| code.contains(name.as_str())) {
                    found.push(format!("{}:{}: {name}", path.display(), n + 1));
                }
            }
        }
        assert!(files >= 10, "read {files} files of {}", dir.display());
        assert!(
            found.is_empty(),
            "the engine imports from above: {found:#?}"
        );
    }
}
