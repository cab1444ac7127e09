-- a unit test fixture stands in for it (the models beside it); never built
select 1 as never_built
