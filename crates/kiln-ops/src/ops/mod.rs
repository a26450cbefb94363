//! Op families. Each module registers its ops in `register`.

use crate::registry::Registry;

pub mod basic;
pub mod binary;
pub mod cast;
pub mod channels_last;
pub(crate) mod compose;
pub mod control;
pub mod conv;
pub mod generate;
pub mod linalg;
pub mod misc;
pub mod movement;
pub mod norm;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod resize;
pub mod rnn;
pub mod shape;
pub mod signal;
pub mod unary;
pub mod winograd;

pub fn register_all(r: &mut Registry) {
    basic::register(r);
    binary::register(r);
    cast::register(r);
    channels_last::register(r);
    control::register(r);
    conv::register(r);
    generate::register(r);
    linalg::register(r);
    misc::register(r);
    movement::register(r);
    norm::register(r);
    pool::register(r);
    quant::register(r);
    reduce::register(r);
    resize::register(r);
    rnn::register(r);
    shape::register(r);
    signal::register(r);
    unary::register(r);
    winograd::register(r);
}
