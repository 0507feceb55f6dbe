//! Rewrites a guest module's `memory.copy` and `memory.fill` into calls to plain-wasm
//! loops appended to the module.
//!
//! Why: the memory fence ([`super::call_fence`]) stops a runaway call by revoking access to
//! the guest's memory, so that the guest's next load or store traps. wasmtime turns a
//! fault into a trap only when the faulting instruction is compiled wasm; `memory.copy`
//! and `memory.fill` run as host functions (libcalls), where a fault would kill the
//! process. Rust's `wasm32-unknown-unknown` standard library is built with bulk memory,
//! so the guest has them whatever its own flags; after this rewrite every access to
//! linear memory is a wasm instruction. Copies and fills in the guest are small and off
//! the per-event path (a few hundred sites, none in its loop).
//!
//! Semantics kept: overlapping copies (`memmove`), fills of the low byte, and the
//! instructions' bounds rule: a range past the memory's end (even an empty one starting
//! past it) traps before anything is written.

use thiserror::Error;
use wasm_encoder::reencode::{utils, Error as ReencodeError, Reencode};
use wasm_encoder::{
    CodeSection, Function, FunctionSection, Instruction, MemArg, TypeSection, ValType,
};
use wasmparser::{Operator, Parser, Payload, TypeRef};

/// Why a module cannot be lowered.
#[derive(Debug, Error)]
pub enum LoweringError {
    #[error("cannot read the guest module: {0}")]
    Parse(#[from] wasmparser::BinaryReaderError),
    #[error("cannot re-encode the guest module: {0}")]
    Reencode(String),
    /// An operation the fence cannot make safe (it runs in the host and touches memory).
    #[error("the guest module uses `{0}`, which the memory fence cannot interrupt safely; use timeout_mechanism = \"epoch\"")]
    Unsupported(&'static str),
    #[error("the guest module has no {0} section")]
    Missing(&'static str),
}

impl From<ReencodeError<LoweringError>> for LoweringError {
    fn from(e: ReencodeError<LoweringError>) -> Self {
        match e {
            ReencodeError::UserError(e) => e,
            ReencodeError::ParseError(e) => LoweringError::Parse(e),
            other => LoweringError::Reencode(other.to_string()),
        }
    }
}

/// What [`lower_bulk_memory`] replaced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lowered {
    pub copies: usize,
    pub fills: usize,
}

/// The module `wasm` with every `memory.copy` and `memory.fill` (of memory 0) turned into
/// a call to an appended function of the same stack effect, `(i32 dst, i32 src|val, i32
/// n) -> ()`.
pub fn lower_bulk_memory(wasm: &[u8]) -> Result<(Vec<u8>, Lowered), LoweringError> {
    let counts = Counts::of(wasm)?;
    let mut lower = Lower {
        sig: counts.types,
        memmove: counts.functions,
        memset: counts.functions + 1,
        lowered: Lowered::default(),
    };
    let mut module = wasm_encoder::Module::new();
    lower.parse_core_module(&mut module, Parser::new(0), wasm)?;
    Ok((module.finish(), lower.lowered))
}

/// Index spaces of the input, which the appended type and functions extend.
struct Counts {
    types: u32,
    /// Imported plus defined functions.
    functions: u32,
}

impl Counts {
    fn of(wasm: &[u8]) -> Result<Self, LoweringError> {
        let (mut types, mut functions) = (None, 0u32);
        let (mut has_functions, mut has_code) = (false, false);
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::TypeSection(s) => {
                    let mut n = 0u32;
                    for group in s {
                        n += u32::try_from(group?.types().len()).unwrap_or(u32::MAX);
                    }
                    types = Some(n);
                }
                Payload::ImportSection(s) => {
                    for import in s.into_imports() {
                        if matches!(import?.ty, TypeRef::Func(_) | TypeRef::FuncExact(_)) {
                            functions += 1;
                        }
                    }
                }
                Payload::FunctionSection(s) => {
                    has_functions = true;
                    functions += s.count();
                }
                Payload::CodeSectionStart { .. } => has_code = true,
                _ => {}
            }
        }
        if !has_functions {
            return Err(LoweringError::Missing("function"));
        }
        if !has_code {
            return Err(LoweringError::Missing("code"));
        }
        Ok(Self {
            types: types.ok_or(LoweringError::Missing("type"))?,
            functions,
        })
    }
}

struct Lower {
    /// Index of the appended type `(i32, i32, i32) -> ()`.
    sig: u32,
    memmove: u32,
    memset: u32,
    lowered: Lowered,
}

impl Reencode for Lower {
    type Error = LoweringError;

    fn instruction<'a>(
        &mut self,
        op: Operator<'a>,
    ) -> Result<Instruction<'a>, ReencodeError<LoweringError>> {
        let unsupported = |what| Err(ReencodeError::UserError(LoweringError::Unsupported(what)));
        match op {
            Operator::MemoryCopy {
                dst_mem: 0,
                src_mem: 0,
            } => {
                self.lowered.copies += 1;
                Ok(Instruction::Call(self.memmove))
            }
            Operator::MemoryFill { mem: 0 } => {
                self.lowered.fills += 1;
                Ok(Instruction::Call(self.memset))
            }
            Operator::MemoryCopy { .. } | Operator::MemoryFill { .. } => {
                unsupported("bulk memory on a second memory")
            }
            Operator::MemoryInit { .. } => unsupported("memory.init"),
            Operator::MemoryAtomicWait32 { .. }
            | Operator::MemoryAtomicWait64 { .. }
            | Operator::MemoryAtomicNotify { .. } => unsupported("atomic wait/notify"),
            other => utils::instruction(self, other),
        }
    }

    fn parse_type_section(
        &mut self,
        types: &mut TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Result<(), ReencodeError<LoweringError>> {
        utils::parse_type_section(self, types, section)?;
        types.ty().function([ValType::I32; 3], []);
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), ReencodeError<LoweringError>> {
        utils::parse_function_section(self, functions, section)?;
        functions.function(self.sig);
        functions.function(self.sig);
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), ReencodeError<LoweringError>> {
        utils::parse_code_section(self, code, section)?;
        code.function(&memmove_body());
        code.function(&memset_body());
        Ok(())
    }
}

// Parameters and locals of the appended functions.
const DST: u32 = 0;
const SRC: u32 = 1;
const VAL: u32 = 1;
const LEN: u32 = 2;
const WORD: u32 = 3;

fn mem(offset: u64, align: u32) -> MemArg {
    MemArg {
        offset,
        align,
        memory_index: 0,
    }
}

/// `while LEN >= 8 { body; LEN -= 8 }` or, with `bytes`, `while LEN != 0 { body; LEN -= 1 }`.
fn counted_loop(f: &mut Function, bytes: bool, body: &[Instruction<'_>]) {
    use Instruction as I;
    let step = if bytes { 1 } else { 8 };
    f.instruction(&I::Block(wasm_encoder::BlockType::Empty));
    f.instruction(&I::Loop(wasm_encoder::BlockType::Empty));
    f.instruction(&I::LocalGet(LEN));
    if bytes {
        f.instruction(&I::I32Eqz);
    } else {
        f.instruction(&I::I32Const(8));
        f.instruction(&I::I32LtU);
    }
    f.instruction(&I::BrIf(1));
    for i in body {
        f.instruction(i);
    }
    f.instruction(&I::LocalGet(LEN));
    f.instruction(&I::I32Const(step));
    f.instruction(&I::I32Sub);
    f.instruction(&I::LocalSet(LEN));
    f.instruction(&I::Br(0));
    f.instruction(&I::End);
    f.instruction(&I::End);
}

/// Traps unless `local + LEN` (in 64 bits, so nothing wraps) is within the memory, for
/// each of `locals`: the instructions check their ranges before writing anything.
fn bounds_check(f: &mut Function, locals: &[u32]) {
    use Instruction as I;
    for (i, &local) in locals.iter().enumerate() {
        f.instruction(&I::LocalGet(local));
        f.instruction(&I::I64ExtendI32U);
        f.instruction(&I::LocalGet(LEN));
        f.instruction(&I::I64ExtendI32U);
        f.instruction(&I::I64Add);
        f.instruction(&I::MemorySize(0));
        f.instruction(&I::I64ExtendI32U);
        f.instruction(&I::I64Const(16));
        f.instruction(&I::I64Shl);
        f.instruction(&I::I64GtU);
        if i > 0 {
            f.instruction(&I::I32Or);
        }
    }
    f.instruction(&I::If(wasm_encoder::BlockType::Empty));
    f.instruction(&I::Unreachable);
    f.instruction(&I::End);
}

/// `local += by`.
fn bump(local: u32, by: i32) -> [Instruction<'static>; 4] {
    use Instruction as I;
    [
        I::LocalGet(local),
        I::I32Const(by),
        I::I32Add,
        I::LocalSet(local),
    ]
}

/// `memmove(dst, src, n)`: forward in 8-byte words then bytes when `dst - src >= n`
/// (unsigned: no overlap a forward copy would read after writing), else backward.
fn memmove_body() -> Function {
    use Instruction as I;
    let mut f = Function::new([]);
    bounds_check(&mut f, &[DST, SRC]);
    // Forward.
    f.instruction(&I::LocalGet(DST));
    f.instruction(&I::LocalGet(SRC));
    f.instruction(&I::I32Sub);
    f.instruction(&I::LocalGet(LEN));
    f.instruction(&I::I32GeU);
    f.instruction(&I::If(wasm_encoder::BlockType::Empty));
    let mut word = vec![
        I::LocalGet(DST),
        I::LocalGet(SRC),
        I::I64Load(mem(0, 0)),
        I::I64Store(mem(0, 0)),
    ];
    word.extend(bump(DST, 8));
    word.extend(bump(SRC, 8));
    counted_loop(&mut f, false, &word);
    let mut byte = vec![
        I::LocalGet(DST),
        I::LocalGet(SRC),
        I::I32Load8U(mem(0, 0)),
        I::I32Store8(mem(0, 0)),
    ];
    byte.extend(bump(DST, 1));
    byte.extend(bump(SRC, 1));
    counted_loop(&mut f, true, &byte);
    f.instruction(&I::Return);
    f.instruction(&I::End);
    // Backward: the last `LEN` bytes first, so an overlapping tail is read before it
    // is overwritten.
    let at = |local, back| {
        [
            I::LocalGet(local),
            I::LocalGet(LEN),
            I::I32Add,
            I::I32Const(back),
            I::I32Sub,
        ]
    };
    let mut word: Vec<I<'_>> = at(DST, 8).to_vec();
    word.extend(at(SRC, 8));
    word.extend([I::I64Load(mem(0, 0)), I::I64Store(mem(0, 0))]);
    counted_loop(&mut f, false, &word);
    let mut byte: Vec<I<'_>> = at(DST, 1).to_vec();
    byte.extend(at(SRC, 1));
    byte.extend([I::I32Load8U(mem(0, 0)), I::I32Store8(mem(0, 0))]);
    counted_loop(&mut f, true, &byte);
    f.instruction(&I::End);
    f
}

/// `memset(dst, val, n)`: the low byte of `val` repeated, in 8-byte words then bytes.
fn memset_body() -> Function {
    use Instruction as I;
    let mut f = Function::new([(1, ValType::I64)]);
    bounds_check(&mut f, &[DST]);
    f.instruction(&I::LocalGet(VAL));
    f.instruction(&I::I64ExtendI32U);
    f.instruction(&I::I64Const(0xff));
    f.instruction(&I::I64And);
    f.instruction(&I::I64Const(0x0101_0101_0101_0101));
    f.instruction(&I::I64Mul);
    f.instruction(&I::LocalSet(WORD));
    let mut word = vec![I::LocalGet(DST), I::LocalGet(WORD), I::I64Store(mem(0, 0))];
    word.extend(bump(DST, 8));
    counted_loop(&mut f, false, &word);
    let mut byte = vec![I::LocalGet(DST), I::LocalGet(VAL), I::I32Store8(mem(0, 0))];
    byte.extend(bump(DST, 1));
    counted_loop(&mut f, true, &byte);
    f.instruction(&I::End);
    f
}

/// Whether `wasm` still holds an operation that runs in the host on guest memory.
#[cfg(test)]
fn uses_bulk_memory(wasm: &[u8]) -> Result<bool, LoweringError> {
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload? {
            let mut ops = body.get_operators_reader()?;
            while !ops.eof() {
                if matches!(
                    ops.read()?,
                    Operator::MemoryCopy { .. }
                        | Operator::MemoryFill { .. }
                        | Operator::MemoryInit { .. }
                ) {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

/// A memory section of one 32-bit memory of `pages` pages, for hand-built test modules.
#[cfg(test)]
pub(super) fn one_memory(pages: u64) -> wasm_encoder::MemorySection {
    let mut mems = wasm_encoder::MemorySection::new();
    mems.memory(wasm_encoder::MemoryType {
        minimum: pages,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    mems
}

#[cfg(test)]
mod tests {
    use wasm_encoder::{ExportKind, ExportSection, Module};
    use wasmtime::{Engine, Instance, Store, TypedFunc};

    use super::*;

    const PAGE: usize = 65_536;

    /// A module exporting `memory` (one page) and `copy(dst, src, n)` / `fill(dst, val,
    /// n)`, written with the bulk-memory instructions.
    fn bulk_module() -> Vec<u8> {
        let mut m = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([ValType::I32; 3], []);
        m.section(&types);
        let mut funcs = FunctionSection::new();
        funcs.function(0);
        funcs.function(0);
        m.section(&funcs);
        m.section(&one_memory(1));
        let mut exports = ExportSection::new();
        exports.export("copy", ExportKind::Func, 0);
        exports.export("fill", ExportKind::Func, 1);
        exports.export("memory", ExportKind::Memory, 0);
        m.section(&exports);
        let mut code = CodeSection::new();
        for op in [
            Instruction::MemoryCopy {
                src_mem: 0,
                dst_mem: 0,
            },
            Instruction::MemoryFill(0),
        ] {
            let mut f = Function::new([]);
            for i in 0..3 {
                f.instruction(&Instruction::LocalGet(i));
            }
            f.instruction(&op);
            f.instruction(&Instruction::End);
            code.function(&f);
        }
        m.section(&code);
        m.finish()
    }

    type Op = TypedFunc<(u32, u32, u32), ()>;

    struct Run {
        store: Store<()>,
        inst: Instance,
        copy: Op,
        fill: Op,
    }

    impl Run {
        fn new(engine: &Engine, wasm: &[u8]) -> Self {
            let module = wasmtime::Module::new(engine, wasm).unwrap();
            let mut store = Store::new(engine, ());
            let inst = Instance::new(&mut store, &module, &[]).unwrap();
            let copy = inst.get_typed_func(&mut store, "copy").unwrap();
            let fill = inst.get_typed_func(&mut store, "fill").unwrap();
            Self {
                store,
                inst,
                copy,
                fill,
            }
        }

        fn memory(&mut self) -> &mut [u8] {
            let m = self.inst.get_memory(&mut self.store, "memory").unwrap();
            m.data_mut(&mut self.store)
        }
    }

    #[test]
    fn lowered_copies_and_fills_match_the_instructions() {
        let original = bulk_module();
        let (lowered, counts) = lower_bulk_memory(&original).unwrap();
        assert_eq!(
            counts,
            Lowered {
                copies: 1,
                fills: 1
            }
        );
        assert!(uses_bulk_memory(&original).unwrap());
        assert!(!uses_bulk_memory(&lowered).unwrap());
        wasmparser::validate(&lowered).unwrap();

        let engine = Engine::default();
        let mut a = Run::new(&engine, &original);
        let mut b = Run::new(&engine, &lowered);
        let pattern: Vec<u8> = (0..PAGE).map(|i| (i * 131 + i / 7) as u8).collect();
        let mut cases = 0;
        // Overlaps in both directions, distances below and above a word, odd tails.
        for n in [0u32, 1, 3, 7, 8, 9, 15, 16, 17, 64, 100, 1000] {
            for (dst, src) in [
                (100u32, 100u32),
                (100, 101),
                (101, 100),
                (100, 104),
                (104, 100),
                (100, 108),
                (108, 100),
                (100, 5000),
                (5000, 100),
                (0, 8),
                (8, 0),
            ] {
                for r in [&mut a, &mut b] {
                    r.memory().copy_from_slice(&pattern);
                    r.copy.call(&mut r.store, (dst, src, n)).unwrap();
                }
                assert!(a.memory() == b.memory(), "copy dst {dst} src {src} n {n}");
                for r in [&mut a, &mut b] {
                    r.memory().copy_from_slice(&pattern);
                    r.fill.call(&mut r.store, (dst, 0x1_23ab + src, n)).unwrap();
                }
                assert!(a.memory() == b.memory(), "fill dst {dst} val {src} n {n}");
                cases += 2;
            }
        }
        assert_eq!(cases, 12 * 11 * 2);

        // Out of bounds traps in both before writing anything, even for an empty range
        // past the end or a range that would wrap around 4 GiB.
        let end = PAGE as u32;
        for (dst, src, n) in [
            (end - 4, 0, 16),
            (0, end - 4, 16),
            (end + 1, 0, 0),
            (0, end + 1, 0),
            (16, 0, u32::MAX),
        ] {
            for r in [&mut a, &mut b] {
                r.memory().copy_from_slice(&pattern);
                assert!(r.copy.call(&mut r.store, (dst, src, n)).is_err());
                assert!(r.memory() == pattern.as_slice(), "copy {dst} {src} {n}");
                let fill = r.fill.call(&mut r.store, (dst, 7, n));
                let past_end = u64::from(dst) + u64::from(n) > u64::from(end);
                assert_eq!(fill.is_err(), past_end, "fill {dst} {n}");
                if past_end {
                    assert!(r.memory() == pattern.as_slice(), "fill {dst} {n}");
                }
            }
            assert!(a.memory() == b.memory(), "{dst} {src} {n}");
        }
        // An empty range ending exactly at the end is in bounds.
        for r in [&mut a, &mut b] {
            r.copy.call(&mut r.store, (end, end, 0)).unwrap();
            r.fill.call(&mut r.store, (end, 0, 0)).unwrap();
        }
    }

    #[test]
    fn the_guest_module_loses_all_its_bulk_memory() {
        let guest = crate::engine_host::GUEST_WASM;
        let (lowered, counts) = lower_bulk_memory(guest).unwrap();
        assert!(uses_bulk_memory(guest).unwrap());
        assert!(counts.copies > 0, "{counts:?}");
        assert!(!uses_bulk_memory(&lowered).unwrap());
        wasmparser::validate(&lowered).unwrap();
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            &b""[..],
            b"\0asm",
            b"\0asm\x01\0\0\0\x01\x05",
            b"not wasm at all",
        ] {
            assert!(lower_bulk_memory(bad).is_err());
        }
    }
}
