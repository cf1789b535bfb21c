pub mod engine;
pub mod limits;
pub mod store;
