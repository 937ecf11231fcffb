//! The family of the ops without record's shape class: repeat, conv_commit and the
//! chunked record's passes. Their class is rows a workgroup, element groups, rows an
//! invocation and steps a chunk; their workgroup is one invocation per `rows_per_thread`
//! rows, or a size of the op's own.

use crate::dtype::GdnDtypes;
use crate::engine::key::{Class, Family, KernelKey, Op, Reduction, Value};

/// The shape class of the plain family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainClass {
    /// Rows a workgroup.
    pub rows: u32,
    /// Groups of 4 elements (or tiles) a row.
    pub groups: u32,
    /// Rows each invocation holds.
    pub rows_per_thread: u32,
    /// Steps a chunk (the chunked passes), 1 otherwise.
    pub chunk: u32,
}

impl From<PlainClass> for Class {
    fn from(c: PlainClass) -> Class {
        Class([c.rows, c.groups, c.rows_per_thread, c.chunk, 0, 0])
    }
}

impl From<Class> for PlainClass {
    fn from(Class(w): Class) -> PlainClass {
        PlainClass {
            rows: w[0],
            groups: w[1],
            rows_per_thread: w[2],
            chunk: w[3],
        }
    }
}

/// A plain op's family: its workgroup size, and the defines its WGSL needs beyond the
/// class's.
pub struct Plain {
    /// Invocations a workgroup; `None`: `rows / rows_per_thread`.
    pub workgroup: Option<u32>,
    /// The op's own defines.
    pub extra: fn(&PlainClass) -> Vec<(&'static str, Value)>,
}

/// The family with its defaults: one invocation per `rows_per_thread` rows, no defines
/// of its own.
pub(crate) const PLAIN: Plain = Plain {
    workgroup: None,
    extra: |_| Vec::new(),
};

impl Family for Plain {
    fn workgroup_size(&self, key: &KernelKey) -> u32 {
        let c = key.plain_class();
        self.workgroup.unwrap_or(c.rows / c.rows_per_thread)
    }

    fn label(&self, key: &KernelKey) -> String {
        let c = key.plain_class();
        let v4 = if key.vec4 { ".v4" } else { "" };
        // One lane a row, as record's family writes its class.
        let (rows, groups, rpt, chunk) = (c.rows, c.groups, c.rows_per_thread, c.chunk);
        format!("l1r{rows}g{groups}t{rpt}c{chunk}{v4}")
    }

    fn defines(&self, key: &KernelKey) -> Vec<(&'static str, Value)> {
        let c = key.plain_class();
        let mut defines = vec![
            // wgsl/entry.wgsl's and strides.wgsl's switches and sizes.
            ("HAS_OFFSETS", Value::Bool(false)),
            ("LANES", Value::U32(1)),
            ("ROWS", Value::U32(c.rows)),
            ("GROUPS", Value::U32(c.groups)),
            ("RPT", Value::U32(c.rows_per_thread)),
            ("CHUNK", Value::U32(c.chunk)),
        ];
        defines.extend((self.extra)(&c));
        defines
    }

    /// A plain key is built for the workgroup reduction; one set to the subgroup
    /// reduction asks for its kernel's subgroup variant (the vector walk's).
    fn uses_subgroups(&self, key: &KernelKey) -> bool {
        key.reduction == Reduction::Subgroup
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl KernelKey {
    /// A key of the plain family: the workgroup-memory reduction, `rows` a workgroup,
    /// `groups` of 4 elements and `rows_per_thread` rows an invocation, `chunk` steps
    /// a chunk, the op's required rows bound.
    pub(crate) fn plain(
        op: Op,
        dtypes: GdnDtypes,
        (rows, groups, rows_per_thread): (u32, u32, u32),
        chunk: u32,
        vec4: bool,
    ) -> Self {
        let class = PlainClass {
            rows,
            groups,
            rows_per_thread,
            chunk,
        };
        KernelKey::new(op, dtypes, Reduction::Workgroup, class.into(), vec4)
    }

    /// The shape class of a key of the plain family.
    pub fn plain_class(&self) -> PlainClass {
        self.class.into()
    }
}
