//! Graph editing shared by the passes: an [`Editor`] keeps each value's
//! producer and use count current while a pass rewrites nodes in one
//! forward sweep, so every rule is a local look at a node and its
//! producers (no rescans: a sweep is linear in the graph).
//!
//! Replacing a value by another is recorded as a substitution that later
//! nodes pick up when the sweep reaches them (nodes are in topological
//! order, so every user of a node's output comes after the node).
//! Values a rewrite must not rename or remove are *pinned*: graph inputs,
//! outputs and captures, and values that subgraphs read by name.
//!
//! Needs: a verified graph. Guarantees (of [`Editor::finish`]): removed
//! nodes are gone, every input refers to its replacement, node order is
//! unchanged otherwise; values that lost their producer stay in
//! `Graph::values` until dead code elimination compacts them.

use kiln_ir::{Attr, Graph, Initializer, Node, Result, Tensor, TensorType, ValueId};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// True when `node` has a subgraph attribute.
pub fn has_subgraph(node: &Node) -> bool {
    node.attrs.values().any(|a| matches!(a, Attr::Graph(_)))
}

/// Runs `rule` on every live node of `g` in order, each node's inputs
/// already substituted; true when any rule changed the graph. The rule may
/// rewrite the node and its producers.
pub fn sweep(
    g: &mut Graph,
    rule: &mut dyn FnMut(&mut Editor, usize) -> Result<()>,
) -> Result<bool> {
    let mut ed = Editor::new(g);
    for n in 0..ed.len() {
        if ed.is_dead(n) {
            continue;
        }
        ed.resolve(n);
        rule(&mut ed, n).map_err(|e| e.context(ed.node(n).describe()))?;
    }
    Ok(ed.finish())
}

/// A graph being rewritten; see the module doc.
pub struct Editor<'g> {
    g: &'g mut Graph,
    producer: Vec<Option<usize>>,
    uses: Vec<usize>,
    pinned: Vec<bool>,
    subst: HashMap<ValueId, ValueId>,
    dead: Vec<bool>,
    /// Every value name, built on the first request for a fresh one.
    names: Option<HashSet<String>>,
    changed: bool,
}

impl<'g> Editor<'g> {
    pub fn new(g: &'g mut Graph) -> Editor<'g> {
        let producer = g.producers();
        let mut uses = g.use_counts();
        let mut pinned = vec![false; g.values.len()];
        for &v in g.inputs.iter().chain(&g.outputs).chain(&g.captures) {
            pinned[v.index()] = true;
        }
        // Subgraphs read values by name: those count as uses and keep their ids.
        let reads: BTreeSet<String> = g.nodes.iter().flat_map(Node::subgraph_reads).collect();
        if !reads.is_empty() {
            let ids = g.names();
            for id in reads.iter().filter_map(|n| ids.get(n.as_str())) {
                pinned[id.index()] = true;
                uses[id.index()] += 1;
            }
        }
        let dead = vec![false; g.nodes.len()];
        Editor {
            g,
            producer,
            uses,
            pinned,
            subst: HashMap::new(),
            dead,
            names: None,
            changed: false,
        }
    }

    pub fn graph(&self) -> &Graph {
        self.g
    }

    /// Number of node slots (live and removed).
    pub fn len(&self) -> usize {
        self.g.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.g.nodes.is_empty()
    }

    pub fn is_dead(&self, n: usize) -> bool {
        self.dead[n]
    }

    pub fn node(&self, n: usize) -> &Node {
        &self.g.nodes[n]
    }

    pub fn ty(&self, v: ValueId) -> &TensorType {
        self.g.ty(v)
    }

    /// The static shape of `v`, if it has one.
    pub fn shape(&self, v: ValueId) -> Option<&[usize]> {
        self.g.ty(v).shape.as_deref()
    }

    /// The opset version that applies to node `n`.
    pub fn opset(&self, n: usize) -> i64 {
        crate::consts::opset(self.g, &self.g.nodes[n])
    }

    /// Where `v` ended up after substitutions.
    pub fn resolve_value(&self, mut v: ValueId) -> ValueId {
        while let Some(&to) = self.subst.get(&v) {
            v = to;
        }
        v
    }

    /// Writes the substitutions into node `n`'s inputs.
    pub fn resolve(&mut self, n: usize) {
        if self.subst.is_empty() {
            return;
        }
        for k in 0..self.g.nodes[n].inputs.len() {
            if let Some(v) = self.g.nodes[n].inputs[k] {
                self.g.nodes[n].inputs[k] = Some(self.resolve_value(v));
            }
        }
    }

    /// Input `k` of node `n` (after substitutions), when present.
    pub fn input(&self, n: usize, k: usize) -> Option<ValueId> {
        self.g.nodes[n]
            .inputs
            .get(k)
            .copied()
            .flatten()
            .map(|v| self.resolve_value(v))
    }

    /// Output `k` of node `n`, when present.
    pub fn output(&self, n: usize, k: usize) -> Option<ValueId> {
        self.g.nodes[n].outputs.get(k).copied().flatten()
    }

    /// The live node computing `v`.
    pub fn producer(&self, v: ValueId) -> Option<usize> {
        self.producer[v.index()].filter(|&p| !self.dead[p])
    }

    /// Node `m` computing `v` when `v` may be absorbed into its user: `v` is
    /// not pinned and has exactly one use.
    pub fn sole_producer(&self, v: ValueId) -> Option<usize> {
        if self.pinned(v) || self.uses(v) != 1 {
            return None;
        }
        self.producer(v)
    }

    /// Uses of `v` by nodes, graph outputs and subgraphs.
    pub fn uses(&self, v: ValueId) -> usize {
        self.uses[v.index()]
    }

    pub fn pinned(&self, v: ValueId) -> bool {
        self.pinned[v.index()]
    }

    /// The constant data of `v`, when it is an initializer.
    pub fn constant(&self, v: ValueId) -> Option<&Initializer> {
        self.g.initializers.get(&v)
    }

    /// True when every use of `v` is by node `n`.
    pub fn used_only_by(&self, v: ValueId, n: usize) -> bool {
        let here = self.g.nodes[n]
            .inputs
            .iter()
            .flatten()
            .filter(|&&i| self.resolve_value(i) == v)
            .count();
        here == self.uses(v)
    }

    /// Sets input `k` of node `n` (growing the input list if needed).
    pub fn set_input(&mut self, n: usize, k: usize, v: Option<ValueId>) {
        if let Some(old) = self.input(n, k) {
            self.uses[old.index()] -= 1;
        }
        if let Some(new) = v {
            self.uses[new.index()] += 1;
        }
        let inputs = &mut self.g.nodes[n].inputs;
        if inputs.len() <= k {
            inputs.resize(k + 1, None);
        }
        inputs[k] = v;
        self.changed = true;
    }

    /// Replaces all inputs of node `n`.
    pub fn set_inputs(&mut self, n: usize, inputs: &[Option<ValueId>]) {
        let old = self.g.nodes[n].inputs.len();
        for (k, v) in inputs.iter().enumerate() {
            self.set_input(n, k, *v);
        }
        for k in inputs.len()..old {
            self.set_input(n, k, None);
        }
        self.g.nodes[n].inputs.truncate(inputs.len());
    }

    /// Makes node `n` compute `v` as output `k` (its previous output there
    /// is left without a producer).
    pub fn set_output(&mut self, n: usize, k: usize, v: ValueId) {
        if let Some(old) = self.output(n, k) {
            self.producer[old.index()] = None;
        }
        self.producer[v.index()] = Some(n);
        self.g.nodes[n].outputs[k] = Some(v);
        self.changed = true;
    }

    /// Changes node `n`'s op and attributes (inputs and outputs stay).
    pub fn set_op(&mut self, n: usize, op: &str, attrs: BTreeMap<String, Attr>) {
        let node = &mut self.g.nodes[n];
        node.op = op.to_string();
        node.domain = String::new();
        node.attrs = attrs;
        self.changed = true;
    }

    /// Changes the type of `v`; only for values no one else has seen
    /// (single-use intermediates a rewrite moves).
    pub fn set_type(&mut self, v: ValueId, ty: TensorType) {
        self.g.values[v.index()].ty = ty;
        self.changed = true;
    }

    /// Removes node `n`; its outputs must be unused (or taken over).
    pub fn remove_node(&mut self, n: usize) {
        for k in 0..self.g.nodes[n].inputs.len() {
            if let Some(v) = self.input(n, k) {
                self.uses[v.index()] -= 1;
            }
        }
        for o in self.g.nodes[n].outputs.iter().flatten() {
            if self.producer[o.index()] == Some(n) {
                self.producer[o.index()] = None;
            }
        }
        self.dead[n] = true;
        self.changed = true;
    }

    /// Removes node `n` when none of its outputs is used any more.
    pub fn remove_if_unused(&mut self, n: usize) {
        let unused = self.g.nodes[n]
            .outputs
            .iter()
            .flatten()
            .all(|&o| self.uses(o) == 0 && !self.pinned(o));
        if unused && !self.dead[n] {
            self.remove_node(n);
        }
    }

    /// Every use of `old` becomes a use of `new` (same type). False, with
    /// nothing changed, when `old` is pinned.
    pub fn replace_value(&mut self, old: ValueId, new: ValueId) -> bool {
        if self.pinned(old) || old == new || self.g.ty(old) != self.g.ty(new) {
            return false;
        }
        self.subst.insert(old, new);
        self.uses[new.index()] += self.uses[old.index()];
        self.uses[old.index()] = 0;
        self.changed = true;
        true
    }

    /// Removes node `n`, whose output `y` equals value `x` (`n`'s other
    /// outputs must be unused). When `y` is pinned it keeps its name: the
    /// node computing `x` writes `y` instead, if `x` has no other use.
    /// False, with nothing changed, when neither is possible.
    pub fn forward(&mut self, n: usize, y: ValueId, x: ValueId) -> bool {
        if self.g.ty(x) != self.g.ty(y) {
            return false;
        }
        if self.replace_value(y, x) {
            self.remove_node(n);
            return true;
        }
        let Some(p) = self.sole_producer(x) else {
            return false;
        };
        let Some(k) = self.g.nodes[p].outputs.iter().position(|o| *o == Some(x)) else {
            return false;
        };
        self.remove_node(n);
        self.set_output(p, k, y);
        true
    }

    /// A value name not used in the graph, from `hint`.
    pub fn fresh_name(&mut self, hint: &str) -> String {
        let names = self
            .names
            .get_or_insert_with(|| self.g.values.iter().map(|v| v.name.clone()).collect());
        let name = kiln_ir::unique_name(hint, &|n| names.contains(n));
        names.insert(name.clone());
        name
    }

    /// Adds a value (no producer yet) named after `hint`.
    pub fn add_value(&mut self, hint: &str, ty: TensorType) -> ValueId {
        let name = self.fresh_name(hint);
        let id = self.g.add_value(name, ty);
        self.producer.push(None);
        self.uses.push(0);
        self.pinned.push(false);
        id
    }

    /// Adds `t` as an initializer named after `hint`.
    pub fn add_constant(&mut self, hint: &str, t: Tensor) -> ValueId {
        let id = self.add_value(hint, t.ty());
        self.g.initializers.insert(id, Initializer::Tensor(t));
        self.changed = true;
        id
    }

    /// Makes `v`, now computed by nothing, the constant `init` (it keeps
    /// its id and name).
    pub fn make_constant(&mut self, v: ValueId, init: Initializer) {
        self.g.values[v.index()].ty = init.ty();
        self.g.initializers.insert(v, init);
        self.changed = true;
    }

    /// Applies the edits: substitutions into every input, removed nodes
    /// dropped. True when anything changed.
    pub fn finish(self) -> bool {
        let Editor {
            g,
            subst,
            dead,
            changed,
            ..
        } = self;
        if !subst.is_empty() {
            let resolve = |mut v: ValueId| {
                while let Some(&to) = subst.get(&v) {
                    v = to;
                }
                v
            };
            for node in &mut g.nodes {
                for i in node.inputs.iter_mut().flatten() {
                    *i = resolve(*i);
                }
            }
        }
        if dead.iter().any(|&d| d) {
            let mut k = 0;
            g.nodes.retain(|_| {
                k += 1;
                !dead[k - 1]
            });
        }
        changed
    }
}
