"""Reading and plotting finished (or running) training runs. Import submodules directly, e.g.
`from cotrain.analysis.plot import plot_runs`, so importing the package does not load matplotlib."""
