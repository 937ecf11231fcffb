//! The WGSL a kernel key compiles to: its op's root file of WGSL assembled (`wgsl.rs`)
//! with the key's defines and a prelude generated from the op's operand table (the
//! bindings and their typed accessors).

use super::loops;
use super::wgsl::{self, Value, WgslError};
use crate::dtype::DType;
use crate::engine::key::{Binding, KernelKey};
use crate::engine::operand::Walk;
use std::fmt::Write as _;

impl KernelKey {
    /// The generated prelude (bindings and their typed accessors) and the names it
    /// declares, which the files of `wgsl/` may `#requires`.
    pub fn prelude(&self) -> (String, Vec<String>) {
        let mut src = String::new();
        for (i, b) in self.bindings().iter().enumerate() {
            // Record and replay prefetch their steps: they load in two halves.
            b.write_wgsl(&mut src, i as u32 + 1, self.vec4, self.op.info().prefetches);
        }
        let names = wgsl::defined_names(&src).into_iter().collect();
        (src, names)
    }

    /// The complete WGSL module for this key: the op's file of `wgsl/` assembled (see
    /// `src/engine/wgsl.rs`) with this key's defines and prelude.
    pub fn source(&self) -> Result<String, WgslError> {
        let mut src = String::new();
        if self.needs_f16() {
            src.push_str("enable f16;\n");
        }
        if self.op.coop() {
            src.push_str("enable wgpu_cooperative_matrix;\n");
        }
        if !src.is_empty() {
            src.push('\n');
        }
        let _ = writeln!(src, "// deltatape kernel {}", self.label());
        let (prelude, names) = self.prelude();
        let defines = self.defines();
        let defines: Vec<(&str, Value)> = defines.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let (root, text) = self.op.info().root;
        src.push_str(&wgsl::assemble(root, text, &defines, &prelude, &names)?);
        Ok(src)
    }

    /// The loop rule (`super::loops`) over `source`, this key's assembled WGSL. A loop
    /// that breaks it is named by the file and line it was written on.
    pub fn check_loops(&self, source: &str) -> Result<(), String> {
        let root = self.op.info().root;
        let files: Vec<_> = wgsl::SOURCES.iter().copied().chain([root]).collect();
        loops::check_assembled(source, &files)
    }
}

/// The prelude's declarations of one binding.
trait WriteWgsl {
    fn write_wgsl(&self, out: &mut String, index: u32, vec4: bool, split: bool);
    fn write_words(&self, out: &mut String, index: u32, access: &str);
    fn write_group_accessors(&self, out: &mut String, vec: bool, split: bool);
}

impl WriteWgsl for Binding {
    /// Append the declaration and accessors of this binding.
    /// `split`: also the two halves of each load (`raw_X` / `unpack_X`, `raw1_X` /
    /// `unpack1_X`).
    fn write_wgsl(&self, out: &mut String, index: u32, vec4: bool, split: bool) {
        let n = self.name;
        let access = if self.access.writes() {
            "read_write"
        } else {
            "read"
        };
        if matches!(self.kind, Walk::Words | Walk::Quads) {
            self.write_words(out, index, access);
            return;
        }
        let vec = vec4 && self.kind == Walk::Rows;
        let elem = match (self.dtype, vec) {
            (DType::F32, false) => "f32",
            (DType::F16, false) => "f16",
            (DType::BF16, false) => "u32",
            (DType::F32, true) => "vec4<f32>",
            (DType::F16, true) => "vec4<f16>",
            (DType::BF16, true) => "vec2<u32>",
        };
        let _ = writeln!(
            out,
            "@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<{elem}>;"
        );
        // Element i as stored (`raw1`, of type `raw1_ty`) and as f32 (`unpack1` of it,
        // named `x`), in any layout. `load1_X` is both; record and replay also get the
        // halves (`raw1_X`, `unpack1_X`), to keep a load in flight until it is used.
        let bf16 = self.dtype == DType::BF16;
        let index = match (vec, bf16) {
            (false, false) => "[i]",
            (false, true) => "[i >> 1u]",
            (true, false) => "[i >> 2u][i & 3u]",
            (true, true) => "[i >> 2u][(i >> 1u) & 1u]",
        };
        let raw1 = format!("{n}_buf{index}");
        let (raw1_ty, unpack1) = match self.dtype {
            DType::F32 => ("f32", "x"),
            DType::F16 => ("f16", "f32(x)"),
            DType::BF16 => ("u32", "select(bf16_lo(x), bf16_hi(x), (i & 1u) == 1u)"),
        };
        let _ = writeln!(
            out,
            "fn load1_{n}(i: u32) -> f32 {{\n    let x = {raw1};\n    return {unpack1};\n}}"
        );
        if split {
            let _ = writeln!(
                out,
                "alias {n}_raw1 = {raw1_ty};\n\
                 fn raw1_{n}(i: u32) -> {n}_raw1 {{\n    return {raw1};\n}}\n\
                 fn unpack1_{n}(x: {n}_raw1, i: u32) -> f32 {{\n    return {unpack1};\n}}"
            );
        }
        if self.kind == Walk::Rows {
            self.write_group_accessors(out, vec, split);
            if self.access.writes() && self.dtype == DType::F16 {
                // One f16 of a row, in either layout (an f16 is stored on its own).
                let _ = writeln!(
                    out,
                    "fn store1_{n}(i: u32, v: f32) {{\n    {n}_buf{index} = f16(v);\n}}"
                );
            }
        }
        if self.access.writes() && self.kind == Walk::Scalars {
            // Scalars are never vec4-declared.
            if self.dtype != DType::BF16 {
                let cast = if self.dtype == DType::F16 {
                    "f16(v)"
                } else {
                    "v"
                };
                let _ = writeln!(
                    out,
                    "fn store1_{n}(i: u32, v: f32) {{\n    {n}_buf[i] = {cast};\n}}"
                );
            }
            let body = match self.dtype {
                DType::F32 => format!("{n}_buf[i] = a;\n    {n}_buf[i + 1u] = b;"),
                DType::F16 => format!("{n}_buf[i] = f16(a);\n    {n}_buf[i + 1u] = f16(b);"),
                DType::BF16 => format!("{n}_buf[i >> 1u] = bf16_pack2(a, b);"),
            };
            let _ = writeln!(
                out,
                "fn store2_{n}(i: u32, a: f32, b: f32) {{\n    {body}\n}}"
            );
        }
        out.push('\n');
    }

    /// A binding of u32 words: `load_X(i)`, and for a written one `store_X(i, v)`;
    /// [`Walk::Quads`] declares them as `vec4<u32>` and adds `store4_X(i4, v)`.
    fn write_words(&self, out: &mut String, index: u32, access: &str) {
        let n = self.name;
        let quads = self.kind == Walk::Quads;
        let (elem, at) = match quads {
            true => ("vec4<u32>", "[i >> 2u][i & 3u]"),
            false => ("u32", "[i]"),
        };
        let _ = writeln!(
            out,
            "@group(0) @binding({index}) var<storage, {access}> {n}_buf: array<{elem}>;\n\
             fn load_{n}(i: u32) -> u32 {{\n    return {n}_buf{at};\n}}"
        );
        if self.access.writes() {
            let _ = writeln!(
                out,
                "fn store_{n}(i: u32, v: u32) {{\n    {n}_buf{at} = v;\n}}"
            );
            if quads {
                let _ = writeln!(
                    out,
                    "fn store4_{n}(i4: u32, v: vec4<u32>) {{\n    {n}_buf[i4] = v;\n}}"
                );
            }
        }
        out.push('\n');
    }

    /// `load_X(base, i, n)` / `store_X(base, i, n, v)`: the 4 elements from `base + i`,
    /// those at `i + c >= n` reading as 0 and left unwritten. Callers keep `base + i`
    /// a multiple of 4 (of 2 for scalar bf16), so a bf16 word is written whole.
    fn write_group_accessors(&self, out: &mut String, vec: bool, split: bool) {
        let n = self.name;
        if vec {
            let (load, store) = match self.dtype {
                DType::F32 => ("x".to_string(), "v".to_string()),
                DType::F16 => ("vec4<f32>(x)".to_string(), "vec4<f16>(v)".to_string()),
                DType::BF16 => (
                    "vec4<f32>(bf16_lo(x.x), bf16_hi(x.x), bf16_lo(x.y), bf16_hi(x.y))".to_string(),
                    "vec2<u32>(bf16_pack2(v.x, v.y), bf16_pack2(v.z, v.w))".to_string(),
                ),
            };
            let _ = writeln!(
                out,
                "fn load_{n}(base: u32, i: u32, n: u32) -> vec4<f32> {{\n    \
                 let x = {n}_buf[(base + i) >> 2u];\n    \
                 return select(vec4<f32>(0.0), {load}, i < n);\n}}"
            );
            if split {
                // load_X in two halves, as raw1_X / unpack1_X.
                let elem = match self.dtype {
                    DType::F32 => "vec4<f32>",
                    DType::F16 => "vec4<f16>",
                    DType::BF16 => "vec2<u32>",
                };
                let _ = writeln!(
                    out,
                    "alias {n}_raw = {elem};\n\
                     fn raw_{n}(base: u32, i: u32, n: u32) -> {n}_raw {{\n    \
                     return {n}_buf[(base + i) >> 2u];\n}}\n\
                     fn unpack_{n}(x: {n}_raw, i: u32, n: u32) -> vec4<f32> {{\n    \
                     return select(vec4<f32>(0.0), {load}, i < n);\n}}"
                );
            }
            if self.access.writes() {
                let _ = writeln!(
                    out,
                    "fn store_{n}(base: u32, i: u32, n: u32, v: vec4<f32>) {{\n    \
                     if i < n {{\n        {n}_buf[(base + i) >> 2u] = {store};\n    }}\n}}"
                );
            }
            return;
        }
        let _ = writeln!(
            out,
            "fn load_{n}(base: u32, i: u32, n: u32) -> vec4<f32> {{\n    \
             var v = vec4<f32>(0.0);\n    \
             for (var c = 0u; c < 4u; c++) {{\n        \
             if i + c < n {{\n            v[c] = load1_{n}(base + i + c);\n        }}\n    }}\n    \
             return v;\n}}"
        );
        if split {
            // Elements one at a time cannot stay in flight: the raw half is the load.
            let _ = writeln!(
                out,
                "alias {n}_raw = vec4<f32>;\n\
                 fn raw_{n}(base: u32, i: u32, n: u32) -> {n}_raw {{\n    \
                 return load_{n}(base, i, n);\n}}\n\
                 fn unpack_{n}(x: {n}_raw, i: u32, n: u32) -> vec4<f32> {{\n    return x;\n}}"
            );
        }
        if self.access.writes() {
            let body = match self.dtype {
                DType::BF16 => format!(
                    "let w = (base + i) >> 1u;\n    \
                     if i < n {{\n        {n}_buf[w] = bf16_pack2(v.x, v.y);\n    }}\n    \
                     if i + 2u < n {{\n        {n}_buf[w + 1u] = bf16_pack2(v.z, v.w);\n    }}"
                ),
                dt => {
                    let cast = if dt == DType::F16 {
                        "f16(v[c])"
                    } else {
                        "v[c]"
                    };
                    format!(
                        "for (var c = 0u; c < 4u; c++) {{\n        \
                         if i + c < n {{\n            {n}_buf[base + i + c] = {cast};\n        }}\n    }}"
                    )
                }
            };
            let _ = writeln!(
                out,
                "fn store_{n}(base: u32, i: u32, n: u32, v: vec4<f32>) {{\n    {body}\n}}"
            );
        }
    }
}
