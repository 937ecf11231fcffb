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

/// Where the files `paths` (under `src/`) name `crate::<module>` for any of `modules`
/// in code (comments aside): the layers' direction, checked by the tests.
#[cfg(test)]
pub(crate) fn imports_of(paths: &[&str], modules: &[&str]) -> Vec<String> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // Written in two parts, so that the tests' lists do not name the modules themselves.
    let names: Vec<String> = modules.iter().map(|m| format!("crate::{m}")).collect();
    let mut found = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(src.join(path)).expect(path);
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for name in names.iter().filter(|name| code.contains(name.as_str())) {
                found.push(format!("src/{path}:{}: {name}", n + 1));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    /// The machinery points one way: no file of `src/engine/` names the ops, the
    /// backends, the rollback or the tuning table above it.
    #[test]
    fn the_engine_imports_nothing_from_above() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
        let files: Vec<String> = (std::fs::read_dir(&dir).unwrap())
            .map(|e| format!("engine/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        assert!(
            files.len() >= 10,
            "read {} files of {}",
            files.len(),
            dir.display()
        );
        let paths: Vec<&str> = files.iter().map(String::as_str).collect();
        let above = [
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
        ];
        let found = super::imports_of(&paths, &above);
        assert!(
            found.is_empty(),
            "the engine imports from above: {found:#?}"
        );
    }

    /// The backend's state (`GpuBackend`, its options) names no op: the ops extend
    /// `GpuBackend` in their folders, so an import the other way would be a circle.
    #[test]
    fn the_gpu_backends_state_imports_no_op() {
        let paths = ["gpu/backend.rs", "gpu/options.rs"];
        let found = super::imports_of(&paths, &["op", "rollback"]);
        assert!(found.is_empty(), "{found:#?}");
    }
}
