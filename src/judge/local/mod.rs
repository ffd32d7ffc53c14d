pub mod constrain;
