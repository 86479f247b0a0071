"""The app's pages, one module each, plus the study display they share."""
