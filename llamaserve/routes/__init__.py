"""HTTP routes; each module serves one part of the API."""
