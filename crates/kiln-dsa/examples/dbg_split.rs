use kiln_dsa::grouping::Grouping;
use kiln_dsa::opgraph::OpGraph;
use kiln_dsa::split_info::split_info;
use kiln_dsa::DsaDesc;
use std::collections::HashMap;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let path = &a[1];
    let batch: usize = a[2].parse().unwrap();
    let pat = &a[3];
    let mut opts = kiln_onnx::ImportOptions::default();
    let declared = kiln_onnx::load(std::path::Path::new(path), &opts)
        .unwrap()
        .graph;
    let mut m = HashMap::new();
    for &v in &declared.inputs {
        let mut s = declared.ty(v).shape.clone().unwrap();
        s[0] = batch;
        m.insert(declared.name(v).to_string(), s);
    }
    opts.input_shapes = m;
    let mut g = kiln_onnx::load(std::path::Path::new(path), &opts)
        .unwrap()
        .graph;
    kiln_passes::optimize(&mut g, &Default::default()).unwrap();
    let mut desc = DsaDesc::preset("stcp920").unwrap();
    desc.float_bytes = Some(2);
    let og = OpGraph::for_device(&g, &desc).unwrap();
    let groups = Grouping::run(&og, &desc);
    for gr in &groups {
        if gr
            .nodes
            .iter()
            .any(|&n| og.nodes[n].name.contains(pat.as_str()))
        {
            println!(
                "group {:?} split {:?}",
                gr.nodes
                    .iter()
                    .map(|&n| og.nodes[n]
                        .name
                        .rsplit('/')
                        .take(2)
                        .collect::<Vec<_>>()
                        .join("<"))
                    .collect::<Vec<_>>(),
                gr.split
            );
            for c in split_info(&og, &gr.nodes, &desc) {
                println!("  cand {:?}", c);
            }
        }
    }
}
