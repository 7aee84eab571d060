//! Counted work: the operations a kernel's hot loop executes per weight, read from GCC's optimized GIMPLE of
//! the kernel compiled as C++ (`metal::optimized_gimple`). No Apple GPU exists here, so this is the proxy for
//! speed (docs/METAL.md says why it is a fair one and where it is not).
//!
//! Method: in the kernel's function, the hot loop is the largest cycle of basic blocks (a strongly connected
//! set) at the loop depth the caller names: the loop over blocks for Q1_0/Q2_0, the loop over rows inside the
//! loop over sub-blocks for the IQ kernels. Its blocks must not hold a deeper loop, i.e. every inner loop was
//! unrolled. Every statement in
//! it counts once per iteration, by kind; PHI nodes, copies and reinterpretations (`as_type`) are free. Per
//! weight = per iteration / the weights one lane covers per iteration (rows × weights per row), which the
//! caller knows from the kernel's geometry.

use std::collections::HashMap;

/// Operations per loop iteration, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounts {
    /// Fused multiply-adds.
    pub fma: usize,
    /// Other float arithmetic: add, sub, mul, div, negate, min/max.
    pub float_arith: usize,
    /// floor / trunc / ceil / round.
    pub float_round: usize,
    /// Conversions between integer and float, and between float widths.
    pub convert: usize,
    /// Integer add, sub, mul, shifts, bitwise ops, integer casts, address arithmetic.
    pub int_arith: usize,
    /// Comparisons and selects (`c ? a : b`).
    pub compare_select: usize,
    /// Conditional branches (`if`).
    pub branches: usize,
    /// Loads and stores.
    pub loads: usize,
    pub stores: usize,
    /// Calls left after inlining (the simdgroup functions; none belong in a hot loop).
    pub calls: usize,
}

impl OpCounts {
    /// Arithmetic and control operations (everything but memory accesses).
    pub fn alu(&self) -> usize {
        self.fma
            + self.float_arith
            + self.float_round
            + self.convert
            + self.int_arith
            + self.compare_select
            + self.branches
    }

    /// Everything counted.
    pub fn total(&self) -> usize {
        self.alu() + self.loads + self.stores + self.calls
    }
}

/// The functions of a GIMPLE dump whose name (as the dump prints it after `;; Function `) starts with `prefix`.
pub fn functions<'a>(gimple: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let marker = ";; Function ";
    let mut starts: Vec<usize> = gimple.match_indices(marker).map(|(i, _)| i).collect();
    starts.push(gimple.len());
    for w in starts.windows(2) {
        let f = &gimple[w[0]..w[1]];
        if f[marker.len()..].starts_with(prefix) {
            out.push(f);
        }
    }
    out
}

/// The functions of a GIMPLE dump whose header (printed or mangled name) mentions `word` as a whole word of an
/// identifier (not preceded by a letter or digit: `q2_0` does not match `pq2_0`).
pub fn functions_mentioning<'a>(gimple: &'a str, word: &str) -> Vec<&'a str> {
    functions(gimple, "")
        .into_iter()
        .filter(|f| {
            let header = f.lines().next().unwrap_or("");
            header
                .match_indices(word)
                .any(|(i, _)| i == 0 || !header.as_bytes()[i - 1].is_ascii_alphanumeric())
        })
        .collect()
}

struct Block {
    depth: usize,
    succ: Vec<usize>,
    stmts: Vec<String>,
}

fn parse_blocks(func: &str) -> (HashMap<String, String>, HashMap<usize, Block>) {
    let mut types = HashMap::new();
    let mut blocks: HashMap<usize, Block> = HashMap::new();
    let mut cur: Option<usize> = None;
    let mut in_succ = false;
    for line in func.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix(";;   basic block ") {
            // ";;   basic block 6, loop depth 1"
            let mut parts = rest.split(',');
            let id: usize = parts
                .next()
                .unwrap_or("")
                .trim()
                .parse()
                .unwrap_or(usize::MAX);
            let depth = parts
                .next()
                .and_then(|p| p.trim().strip_prefix("loop depth "))
                .and_then(|d| d.split_whitespace().next())
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            blocks.insert(
                id,
                Block {
                    depth,
                    succ: Vec::new(),
                    stmts: Vec::new(),
                },
            );
            cur = Some(id);
            in_succ = false;
            continue;
        }
        if let Some(rest) = t.strip_prefix(";;    succ:") {
            in_succ = true;
            if let (Some(c), Ok(n)) = (cur, rest.trim().parse::<usize>()) {
                blocks.get_mut(&c).unwrap().succ.push(n);
            }
            continue;
        }
        if t.starts_with(";;") {
            if in_succ {
                if let (Some(c), Ok(n)) = (cur, t.trim_start_matches(';').trim().parse::<usize>()) {
                    blocks.get_mut(&c).unwrap().succ.push(n);
                    continue;
                }
            }
            in_succ = false;
            continue;
        }
        in_succ = false;
        match cur {
            None => {
                // declarations before the first block: "  float _347;" / "  const float bf;"
                if let Some(decl) = t.strip_suffix(';') {
                    if let Some(sp) = decl.rfind(' ') {
                        types.insert(decl[sp + 1..].to_string(), decl[..sp].to_string());
                    }
                }
            }
            Some(c) => {
                if !t.is_empty() && t != "}" {
                    blocks.get_mut(&c).unwrap().stmts.push(t.to_string());
                }
            }
        }
    }
    (types, blocks)
}

fn is_ssa(name: &str) -> bool {
    // "_347", "bf_577", "ivtmp.8244_214", "x_3(D)"
    let name = name.trim_end_matches("(D)");
    match name.rfind('_') {
        Some(i) => {
            i + 1 < name.len()
                && name[i + 1..].bytes().all(|b| b.is_ascii_digit())
                && name[..i]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        }
        None => false,
    }
}

fn type_of<'a>(types: &'a HashMap<String, String>, ssa: &str) -> &'a str {
    let name = ssa.trim_end_matches("(D)");
    if let Some(t) = types.get(name) {
        return t;
    }
    if let Some(i) = name.rfind('_') {
        if let Some(t) = types.get(&name[..i]) {
            return t;
        }
    }
    ""
}

fn is_float_type(t: &str) -> bool {
    t.contains("float") || t.contains("_Float16") || t.contains("double") || t.contains("half")
}

fn is_constant(s: &str) -> bool {
    let s = s.trim();
    s.starts_with(|c: char| c.is_ascii_digit() || c == '-')
}

fn classify(types: &HashMap<String, String>, stmt: &str, c: &mut OpCounts) {
    let s = stmt.trim_end_matches(';').trim();
    if s.starts_with('#')
        || s.starts_with("goto")
        || s.starts_with("<bb")
        || s == "else"
        || s.starts_with("return")
        || s.starts_with("//")
    {
        return;
    }
    if s.starts_with("if (") {
        c.branches += 1;
        return;
    }
    let Some((lhs, rhs)) = s.split_once(" = ") else {
        // a call whose value is unused
        if s.contains(" (") {
            c.calls += 1;
        }
        return;
    };
    let (lhs, rhs) = (lhs.trim(), rhs.trim());
    if rhs.contains("{CLOBBER") {
        return;
    }
    if !is_ssa(lhs) {
        c.stores += 1;
        return;
    }
    let float = is_float_type(type_of(types, lhs));
    // calls and internal functions
    if let Some(open) = rhs.find(" (") {
        let callee = &rhs[..open];
        if !callee.contains(' ') && !callee.starts_with('(') {
            let bare = callee
                .trim_start_matches("__builtin_")
                .trim_start_matches('.');
            if ["floor", "trunc", "ceil", "round", "rint", "nearbyint"]
                .iter()
                .any(|f| bare.starts_with(f))
            {
                c.float_round += 1;
            } else if bare.starts_with("fma") || bare == "FMA" || bare == "FMS" || bare == "FNMA" {
                c.fma += 1;
            } else {
                c.calls += 1;
            }
            return;
        }
    }
    if rhs.starts_with("VIEW_CONVERT_EXPR") || rhs.starts_with("BIT_FIELD_REF") {
        return;
    }
    if rhs.starts_with("MIN_EXPR") || rhs.starts_with("MAX_EXPR") || rhs.starts_with("ABS_EXPR") {
        if float {
            c.float_arith += 1
        } else {
            c.int_arith += 1
        }
        return;
    }
    if rhs.contains(" ? ") {
        // "a != 0 ? b : c": the comparison folded into the select counts with it
        c.compare_select += 1;
        return;
    }
    // a cast "(type) x"
    if rhs.starts_with('(') {
        if let Some(close) = rhs.find(") ") {
            let to = &rhs[1..close];
            let from_operand = rhs[close + 2..].trim();
            let from_float = is_ssa(from_operand) && is_float_type(type_of(types, from_operand));
            if is_float_type(to) || from_float {
                c.convert += 1;
            } else {
                c.int_arith += 1;
            }
            return;
        }
    }
    // memory reads
    if rhs.starts_with("MEM")
        || rhs.starts_with('*')
        || (!is_ssa(rhs)
            && !is_constant(rhs)
            && (rhs.contains('[') || rhs.contains('.'))
            && !rhs.contains(' '))
    {
        c.loads += 1;
        return;
    }
    if rhs.starts_with('&') {
        c.int_arith += 1;
        return;
    }
    let tokens: Vec<&str> = rhs.split_whitespace().collect();
    match tokens.as_slice() {
        [_] => {} // a copy or a constant
        [op, _] if *op == "-" || *op == "~" || *op == "!" => {
            if float {
                c.float_arith += 1
            } else {
                c.int_arith += 1
            }
        }
        [_, op, _] => match *op {
            "==" | "!=" | "<" | "<=" | ">" | ">=" | "unord" | "ord" => c.compare_select += 1,
            _ => {
                if float {
                    c.float_arith += 1
                } else {
                    c.int_arith += 1
                }
            }
        },
        _ => {
            // "-x", "w* 4" forms GCC prints rarely; count as one arithmetic op of the result's kind
            if float {
                c.float_arith += 1
            } else {
                c.int_arith += 1
            }
        }
    }
}

/// The hot loop's operation counts for one function of a GIMPLE dump (its text from `functions`): the largest
/// loop at loop depth `depth` (1: a loop at the function's top level; 2: a loop inside one). Blocks of a deeper
/// loop inside it are an error: every inner loop of the hot one must have been unrolled.
pub fn hot_loop(func: &str, depth: usize) -> Result<OpCounts, String> {
    let (types, blocks) = parse_blocks(func);
    if blocks.is_empty() {
        return Err("no basic blocks (was the dump made with -blocks?)".into());
    }
    // Strongly connected sets by mutual reachability (kernels have a few hundred blocks), in the subgraph of
    // blocks at depth >= `depth`: so the enclosing loop does not join sibling loops into one set.
    let mut ids: Vec<usize> = blocks
        .keys()
        .copied()
        .filter(|b| blocks[b].depth >= depth)
        .collect();
    // In block order, so that of two equal loops (a kernel instantiated twice) the first is always the one.
    ids.sort_unstable();
    let reach = |from: usize| -> Vec<usize> {
        let mut seen = vec![from];
        let mut stack = vec![from];
        while let Some(b) = stack.pop() {
            for &n in blocks.get(&b).map(|b| b.succ.as_slice()).unwrap_or(&[]) {
                if blocks.get(&n).is_some_and(|nb| nb.depth >= depth) && !seen.contains(&n) {
                    seen.push(n);
                    stack.push(n);
                }
            }
        }
        seen
    };
    let reachable: HashMap<usize, Vec<usize>> = ids.iter().map(|&b| (b, reach(b))).collect();
    let mut best: Option<(usize, Vec<usize>)> = None;
    for &b in &ids {
        if blocks[&b].depth != depth {
            continue;
        }
        let in_cycle = blocks[&b]
            .succ
            .iter()
            .any(|n| reachable.get(n).is_some_and(|r| r.contains(&b)));
        if !in_cycle {
            continue;
        }
        let mut scc: Vec<usize> = reachable[&b]
            .iter()
            .copied()
            .filter(|&o| reachable.get(&o).is_some_and(|r| r.contains(&b)))
            .collect();
        scc.sort_unstable();
        let size: usize = scc.iter().map(|i| blocks[i].stmts.len()).sum();
        if best.as_ref().is_none_or(|(s, _)| size > *s) {
            best = Some((size, scc));
        }
    }
    let (_, scc) = best.ok_or_else(|| format!("no loop at depth {depth} in the function"))?;
    if scc.iter().any(|i| blocks[i].depth != depth) {
        return Err("the hot loop holds an inner loop (a FOR_UNROLL loop was not unrolled)".into());
    }
    let mut c = OpCounts::default();
    for i in &scc {
        for s in &blocks[i].stmts {
            classify(&types, s, &mut c);
        }
    }
    Ok(c)
}

/// The hot-loop counts of the kernel for ggml type `format` (`q2_0`, `iq2_s`, …) in a GIMPLE dump. Its body lives
/// in whichever function inlining left it (the kernel, its `_impl` or `_id` form, or our shared impl's clone for
/// the format's decoder): of the functions naming `kernel_mul_mv_<format>_f32` or `lowbit_<format>_decoder`, the
/// one with the biggest hot loop at `depth`.
pub fn kernel_counts(gimple: &str, format: &str, depth: usize) -> Result<OpCounts, String> {
    let mut bodies = functions_mentioning(gimple, &format!("kernel_mul_mv_{format}_f32"));
    bodies.extend(functions_mentioning(
        gimple,
        &format!("lowbit_{format}_decoder"),
    ));
    let mut errors = Vec::new();
    bodies
        .into_iter()
        .filter_map(|body| match hot_loop(body, depth) {
            Ok(c) => Some(c),
            Err(e) => {
                let header = body.lines().next().unwrap_or("");
                errors.push(format!(
                    "{}: {e}",
                    &header[..header.find(" (").unwrap_or(header.len())]
                ));
                None
            }
        })
        .max_by_key(|c| c.total())
        .ok_or_else(|| format!("{format}: no hot loop ({})", errors.join("; ")))
}
