"""Who may call and read: API keys and their scopes, the secrets a tenant's slug names,
a document's readers and the person a call is made for."""
