"""The round policies: OAK and its baselines behind one `RoundPolicy` interface."""
