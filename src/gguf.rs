//! A GGUF (version 3) writer: enough of the format to write llama-architecture models that llama.cpp loads.
//!
//! Layout: magic `GGUF`, version, tensor count, key-value count; the key-value pairs; one info record per tensor
//! (name, dimensions with `ne[0]` first, ggml type, offset into the data section); padding to the alignment;
//! the tensor data, each tensor starting at a multiple of the alignment (32 bytes, ggml's default).

use std::io::{self, Write};

pub const ALIGNMENT: u64 = 32;

/// A metadata value (the subset llama.cpp's loader needs).
#[derive(Clone, Debug)]
pub enum Value {
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    StrArray(Vec<String>),
    F32Array(Vec<f32>),
    I32Array(Vec<i32>),
}

// GGUF value type tags.
const T_I32: u32 = 5;
const T_U32: u32 = 4;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;

/// Produces a tensor's bytes into a buffer of exactly its size.
pub type Fill<'a> = Box<dyn Fn(&mut [u8]) + Sync + 'a>;

/// A tensor to write: its bytes come from `fill`, called once with a buffer of exactly `nbytes`.
pub struct Tensor<'a> {
    pub name: String,
    /// `ne[0]` (the row length) first.
    pub dims: Vec<u64>,
    pub ggml_type: u32,
    pub nbytes: usize,
    pub fill: Fill<'a>,
}

fn put_str(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn put_value(w: &mut impl Write, v: &Value) -> io::Result<()> {
    match v {
        Value::U32(x) => {
            w.write_all(&T_U32.to_le_bytes())?;
            w.write_all(&x.to_le_bytes())
        }
        Value::I32(x) => {
            w.write_all(&T_I32.to_le_bytes())?;
            w.write_all(&x.to_le_bytes())
        }
        Value::F32(x) => {
            w.write_all(&T_F32.to_le_bytes())?;
            w.write_all(&x.to_le_bytes())
        }
        Value::Bool(x) => {
            w.write_all(&T_BOOL.to_le_bytes())?;
            w.write_all(&[*x as u8])
        }
        Value::Str(s) => {
            w.write_all(&T_STRING.to_le_bytes())?;
            put_str(w, s)
        }
        Value::StrArray(a) => {
            w.write_all(&T_ARRAY.to_le_bytes())?;
            w.write_all(&T_STRING.to_le_bytes())?;
            w.write_all(&(a.len() as u64).to_le_bytes())?;
            a.iter().try_for_each(|s| put_str(w, s))
        }
        Value::F32Array(a) => {
            w.write_all(&T_ARRAY.to_le_bytes())?;
            w.write_all(&T_F32.to_le_bytes())?;
            w.write_all(&(a.len() as u64).to_le_bytes())?;
            a.iter().try_for_each(|x| w.write_all(&x.to_le_bytes()))
        }
        Value::I32Array(a) => {
            w.write_all(&T_ARRAY.to_le_bytes())?;
            w.write_all(&T_I32.to_le_bytes())?;
            w.write_all(&(a.len() as u64).to_le_bytes())?;
            a.iter().try_for_each(|x| w.write_all(&x.to_le_bytes()))
        }
    }
}

fn padding(pos: u64) -> usize {
    ((ALIGNMENT - pos % ALIGNMENT) % ALIGNMENT) as usize
}

/// Writes a whole GGUF file: metadata, tensor infos, then each tensor's bytes as `fill` produces them.
pub fn write(w: &mut impl Write, kv: &[(String, Value)], tensors: &[Tensor]) -> io::Result<u64> {
    let mut head = Vec::new();
    head.extend_from_slice(b"GGUF");
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    head.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        put_str(&mut head, k)?;
        put_value(&mut head, v)?;
    }
    let mut offset = 0u64;
    for t in tensors {
        put_str(&mut head, &t.name)?;
        head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&t.ggml_type.to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offset += t.nbytes as u64;
        offset += padding(offset) as u64;
    }
    let pad = padding(head.len() as u64);
    head.resize(head.len() + pad, 0);
    w.write_all(&head)?;
    let mut written = head.len() as u64;
    let mut buf = Vec::new();
    for t in tensors {
        buf.clear();
        buf.resize(t.nbytes, 0);
        (t.fill)(&mut buf);
        let pad = padding(t.nbytes as u64);
        buf.resize(t.nbytes + pad, 0);
        w.write_all(&buf)?;
        written += buf.len() as u64;
    }
    Ok(written)
}

/// Little-endian reads over a GGUF file, with one error message for a truncated or malformed file.
struct Reader {
    r: std::io::BufReader<std::fs::File>,
    path: std::path::PathBuf,
}

impl Reader {
    fn bad(&self, what: &str) -> String {
        format!("{}: not a readable GGUF file ({what})", self.path.display())
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        use std::io::Read;
        let mut b = [0u8; 8];
        self.r
            .read_exact(&mut b[..n])
            .map_err(|_| self.bad("truncated"))?;
        Ok(u64::from_le_bytes(b))
    }

    fn skip(&mut self, n: u64) -> Result<(), String> {
        use std::io::Read;
        let copied = std::io::copy(&mut self.r.by_ref().take(n), &mut std::io::sink())
            .map_err(|e| e.to_string())?;
        if copied == n {
            Ok(())
        } else {
            Err(self.bad("truncated"))
        }
    }

    fn skip_value(&mut self, t: u64) -> Result<(), String> {
        match t {
            0 | 1 | 7 => self.skip(1),
            2 | 3 => self.skip(2),
            4..=6 => self.skip(4),
            10..=12 => self.skip(8),
            8 => {
                let len = self.uint(8)?;
                self.skip(len)
            }
            9 => {
                let element = self.uint(4)?;
                let n = self.uint(8)?;
                (0..n).try_for_each(|_| self.skip_value(element))
            }
            _ => Err(self.bad(&format!("unknown value type {t}"))),
        }
    }
}

/// Reads a GGUF file's tensor names and ggml types (the metadata values are skipped).
pub fn tensor_types(path: &std::path::Path) -> Result<Vec<(String, u32)>, String> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut rd = Reader {
        r: std::io::BufReader::new(file),
        path: path.to_path_buf(),
    };
    let mut magic = [0u8; 4];
    rd.r.read_exact(&mut magic)
        .map_err(|_| rd.bad("too short"))?;
    if &magic != b"GGUF" {
        return Err(rd.bad("no GGUF magic"));
    }
    let version = rd.uint(4)?;
    if !(2..=3).contains(&version) {
        return Err(rd.bad(&format!("version {version}")));
    }
    let n_tensors = rd.uint(8)?;
    let n_kv = rd.uint(8)?;
    for _ in 0..n_kv {
        let len = rd.uint(8)?;
        rd.skip(len)?;
        let t = rd.uint(4)?;
        rd.skip_value(t)?;
    }
    let mut out = Vec::new();
    for _ in 0..n_tensors {
        let len = rd.uint(8)?;
        if len > 1 << 16 {
            return Err(rd.bad("tensor name too long"));
        }
        let mut name = vec![0u8; len as usize];
        rd.r.read_exact(&mut name)
            .map_err(|_| rd.bad("tensor name"))?;
        let n_dims = rd.uint(4)?;
        rd.skip(8 * n_dims)?;
        let t = rd.uint(4)? as u32;
        rd.uint(8)?;
        out.push((String::from_utf8_lossy(&name).into_owned(), t));
    }
    Ok(out)
}
