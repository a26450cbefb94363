//! The weights of an export, as the model code reads them: one image with
//! every weight a kernel reads as it is, then every packing (made here, by
//! the kernels' own prepacking entry points compiled for the host with the
//! export's vector width forced), each 64-byte aligned.

use crate::program::{CpuOptions, CpuProgram};
use crate::weights::{prepack_all, raw_weights, Weights};

use kiln_ir::{bail, Error, Result};
use std::collections::BTreeMap;

/// Where the weights of an export live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightsMode {
    /// `NAME.weights.bin`, loaded by the caller.
    File,
    /// A C array in `NAME_weights.c` (for targets without a file system).
    Embed,
}

impl WeightsMode {
    pub fn parse(s: &str) -> Result<WeightsMode> {
        match s {
            "file" => Ok(WeightsMode::File),
            "embed" => Ok(WeightsMode::Embed),
            _ => bail!("--weights must be 'file' or 'embed', not '{s}'"),
        }
    }
}

/// The weight image and where each part is.
pub struct WeightImage {
    pub bytes: Vec<u8>,
    /// Offset of weight slot `w` (`Loc::Weight(w)`) where a kernel reads it.
    pub raw: BTreeMap<usize, usize>,
    /// Offset of each packing.
    pub packings: Vec<usize>,
}

impl WeightImage {
    /// Writes the image the way `mode` says through `write` (file name,
    /// bytes); returns the C sources it added.
    pub fn write(
        &self,
        name: &str,
        mode: WeightsMode,
        write: &mut impl FnMut(String, &[u8]) -> Result<()>,
    ) -> Result<Vec<String>> {
        match mode {
            WeightsMode::File => {
                write(format!("{name}.weights.bin"), &self.bytes)?;
                Ok(Vec::new())
            }
            WeightsMode::Embed => {
                let file = format!("{name}_weights.c");
                write(file.clone(), self.c_array(name).as_bytes())?;
                Ok(vec![file])
            }
        }
    }

    fn c_array(&self, name: &str) -> String {
        let mut s = format!(
            "#include \"{name}.h\"\n_Alignas(64) const unsigned char {name}_weights[{}] = {{",
            self.bytes.len().max(1)
        );
        for (i, b) in self.bytes.iter().enumerate() {
            if i % 32 == 0 {
                s.push('\n');
            }
            s.push_str(&b.to_string());
            s.push(',');
        }
        s.push_str("\n};\n");
        s
    }
}

/// Packs `program`'s weights and lays out the image; records each
/// packing's size in the plan.
pub fn pack(program: &mut CpuProgram, cpu: &CpuOptions, defines: &str) -> Result<WeightImage> {
    let raw = raw_weights(&program.graph, &program.plan);
    let weights = Weights::decode(&program.graph, &program.plan, &raw)?;
    let threads = cpu.threads.max(1);
    let packed = if program.plan.packings.is_empty() {
        Vec::new()
    } else {
        let units = program.c_units(threads, defines, "");
        let (lib, _) = kiln_runtime::jit::compile(&cpu.compiler, &units, threads)?;
        prepack_all(&lib, &program.graph, &mut program.plan, &weights, threads)?
    };
    let mut image = WeightImage {
        bytes: Vec::new(),
        raw: BTreeMap::new(),
        packings: Vec::new(),
    };
    for w in raw {
        let offset = image.append(&weights.tensor(w)?.data.to_le_bytes()?);
        image.raw.insert(w, offset);
    }
    for p in &packed {
        let offset = image.append(p.bytes());
        image.packings.push(offset);
    }
    Ok(image)
}

impl WeightImage {
    /// Appends `data` at the next 64-byte boundary; returns its offset.
    fn append(&mut self, data: &[u8]) -> usize {
        let offset = self.bytes.len().div_ceil(64) * 64;
        self.bytes.resize(offset, 0);
        self.bytes.extend_from_slice(data);
        offset
    }
}

/// The C expression of weight slot `w` in the run function (`W` is the
/// image), or a null pointer where only its packing is read.
pub fn weight_expr(image: &WeightImage, w: usize) -> String {
    match image.raw.get(&w) {
        Some(off) => format!("(void*)(W + {off})"),
        None => "0".to_string(),
    }
}

/// Error for a value the run function cannot address.
pub fn unplaced(id: usize) -> Error {
    Error::new(format!(
        "execution plan: value %{id} has no place an export can address"
    ))
}
