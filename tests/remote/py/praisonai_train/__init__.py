"""Stand-in for the praisonai_train package on the test hosts (see __main__)."""
